"""Shared head of the machine-readable records (fit, time, place): what was asked, on what hardware."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 1


class RecordHead(BaseModel):
    """Fields every model-on-target record starts with (documented in docs/cli-output.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    model: str
    target: str
    hardware: str
    device_kind: str
    precision: str
    phase: str
    batch: int
    context: int
