"""Packaging helper: ship the top-level catalogs/ folder inside the package as ``wseplan._catalogs``.

Metadata lives in pyproject.toml; this file only lists packages, which pyproject's static tables cannot mix
with an automatic package search.
"""
from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["wseplan", "wseplan.*"]) + ["wseplan._catalogs"],
    package_dir={"wseplan._catalogs": "catalogs"},
    package_data={"wseplan._catalogs": ["*.yaml", "**/*.yaml", "**/*.csv"]},
    include_package_data=False,
)
