"""Catalogs: cited hardware, model and default entries loaded into frozen pydantic schemas."""
from .load import Catalog, default_catalog_dir, load_catalog, read_yaml
from .schema import PRECISIONS, GenericModel, Gpu, Model, Quantity, System, Wafer

__all__ = ["Catalog", "load_catalog", "default_catalog_dir", "read_yaml", "Quantity", "Wafer", "System",
           "Gpu", "Model", "GenericModel", "PRECISIONS"]
