"""System-parameter database: location, fingerprint, storage and lookup."""
from .comm_lookup import CommParams, load_comm
from .location import default_path, resolve
from .lookup import SPLookup, SPTable, SystemParameters, default_k, load_sp
from .store import (
    RECORD_DTYPE,
    SCHEMA_VERSION,
    Database,
    DatabaseCorrupt,
    DatabaseError,
    DatabaseMissing,
    ForeignMachine,
    SchemaMismatch,
    load,
    save,
)

__all__ = ["CommParams", "RECORD_DTYPE", "SPLookup", "SCHEMA_VERSION", "Database", "DatabaseCorrupt", "DatabaseError",
           "DatabaseMissing", "ForeignMachine", "SPTable", "SchemaMismatch", "SystemParameters",
           "default_k", "default_path", "load", "load_comm", "load_sp", "resolve", "save"]
