"""Faults of Redis's own disk, on a real server: power loss, a full disk, a stalling fsync.

``diskshim.c`` (beside this file) is preloaded into a real ``redis-server`` or
``valkey-server``; it records how much of each data file was on disk at its last fsync,
can make writes fail with ENOSPC, and can make each fsync stall. :class:`FaultyDisk`
builds it (with the machine's C compiler, once per source), starts a
:class:`~timer.testing.RedisServer` on it and drives it:

- :meth:`FaultyDisk.power_cut`: the server is frozen (SIGSTOP: no more writes, no more
  replies), every data file is cut back to what its last fsync made durable, and the
  server is killed: exactly what a power loss takes, which kill -9 alone never does
  (the page cache keeps it).
- :meth:`FaultyDisk.full`: writes to the data files fail with ENOSPC, as on a full
  filesystem, until it is set back.
- :meth:`FaultyDisk.stall_fsync`: each fsync of a data file first waits that long.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import shutil
import signal
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from timer.testing import RedisServer

SHIM_SOURCE = Path(__file__).with_name("diskshim.c")


def build_shim(out_dir: Path) -> Path:
    """The shim as a shared object in ``out_dir`` (compiled once per source text)."""
    digest = hashlib.sha256(SHIM_SOURCE.read_bytes()).hexdigest()[:12]
    target = out_dir / f"diskshim-{digest}.so"
    if target.exists():
        return target
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("the disk-fault tests need a C compiler (cc or gcc) to build diskshim")
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    subprocess.run(
        [cc, "-O2", "-shared", "-fPIC", "-o", str(partial), str(SHIM_SOURCE), "-ldl"],
        check=True,
        capture_output=True,
    )
    partial.replace(target)
    return target


@dataclass
class Cut:
    """What a power cut took: bytes per data file that were written but never fsynced."""

    lost_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.lost_bytes.values())


class FaultyDisk:
    """A real server whose data directory sits on a disk the test can fail."""

    def __init__(self, base: Path, shim: Path, **server: object) -> None:
        self.base = base
        self.data_dir = base / "data"
        self.log = base / "synced.log"
        self.ctl = base / "disk.ctl"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.ctl.write_bytes(bytes(4096))
        self._ctl_file = self.ctl.open("r+b")
        self._ctl = mmap.mmap(self._ctl_file.fileno(), 4096)
        env = {
            "LD_PRELOAD": str(shim),
            "TW_FAULT_DIR": str(self.data_dir.resolve()),
            "TW_FAULT_LOG": str(self.log),
            "TW_FAULT_CTL": str(self.ctl),
        }
        self.server = RedisServer(self.data_dir, env=env, **server)  # type: ignore[arg-type]

    def start(self) -> RedisServer:
        self.log.unlink(missing_ok=True)  # each run's durable facts start from what is on disk
        self.full(False)
        self.stall_fsync(0)
        return self.server.start()

    def full(self, on: bool = True) -> None:
        """Make writes to the data files fail with ENOSPC (``on``), or succeed again."""
        self._ctl[0:4] = struct.pack("<i", 1 if on else 0)

    def stall_fsync(self, ms: int) -> None:
        """Make each fsync of a data file wait ``ms`` first (0: no stall)."""
        self._ctl[4:8] = struct.pack("<i", ms)

    def synced_sizes(self) -> dict[str, int]:
        """Each data file's bytes on disk, as the shim's log says."""
        sizes: dict[str, int] = {}
        for line in self.log.read_text().splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "R":
                old, _, new = rest.partition("\t")
                if new != "-":
                    moved = sizes.pop(old, None) if old != "-" else None
                    sizes[new] = moved if moved is not None else _size(new)
                else:
                    sizes.pop(old, None)
                continue
            size_text, _, path = rest.partition(" ")
            if kind == "O":
                sizes.setdefault(path, int(size_text))
            elif kind in ("T", "S"):
                sizes[path] = int(size_text)
        return sizes

    def power_cut(self) -> Cut:
        """Freeze the server, cut each data file back to its last fsync, kill it."""
        proc = self.server.process
        assert proc is not None and proc.poll() is None, "the server is not running"
        # every thread (and a forked child) stops: no write, no reply after this
        os.killpg(proc.pid, signal.SIGSTOP)
        cut = Cut()
        for path, size in self.synced_sizes().items():
            now = _size(path)
            if now > size:
                os.truncate(path, size)
                cut.lost_bytes[path] = now - size
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return cut

    def restart(self) -> RedisServer:
        self.server.process = None
        return self.start()

    def close(self) -> None:
        self.server.stop()
        self._ctl.close()
        self._ctl_file.close()


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
