"""The seal of a database file: its first ``USERBLOCK`` bytes (an HDF5 user block, which the
library skips) hold the SHA-256 of the rest (``seal``), and a reader parses only bytes that match
it (``seal_problem``): the HDF5 library can crash or spin on a damaged file, so a damaged one is
refused before it is parsed. A file without a user block (written before seals, or by hand) starts
with the HDF5 signature and is read unchecked. ``create`` makes a new file with room for its seal."""
from __future__ import annotations

import hashlib
import os

USERBLOCK = 512                      # bytes before the HDF5 data: the seal
SEAL = b"autotune-db sha256 "        # the seal's first bytes, then the digest's 64 hex digits
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def seal_problem(data: bytes) -> str | None:
    """Why the bytes of a database file may not be parsed (None: sealed and intact, or unsealed)."""
    if data.startswith(HDF5_SIGNATURE):
        return None
    if not data.startswith(SEAL):
        return "damaged or not a database (neither an autotune seal nor an HDF5 signature at its start)"
    digest = data[len(SEAL):len(SEAL) + 64]
    if hashlib.sha256(memoryview(data)[USERBLOCK:]).hexdigest().encode() != digest:
        return "damaged (its content does not match its checksum)"
    return None


def seal(path: str | os.PathLike) -> None:
    """Write the SHA-256 of everything after the user block into it (a file made by ``create``;
    one without a user block, written by hand, is left as it is)."""
    with open(path, "r+b") as fh:
        if fh.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE:
            return
        fh.seek(USERBLOCK)
        digest = hashlib.sha256(fh.read()).hexdigest().encode()
        fh.seek(0)
        fh.write((SEAL + digest + b"\n").ljust(USERBLOCK, b"\0"))


def create(path: str | os.PathLike):
    """A new, empty database file with room for its seal."""
    import h5py

    return h5py.File(path, "w", locking=False, userblock_size=USERBLOCK)
