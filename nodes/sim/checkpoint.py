"""A long simulation paused to a file and resumed in another process.

A 10,000-peer Meghdoot run with 40,000 events takes about three hours of a core here,
longer than one sitting at the machine. The simulator can stop between two of its events
once a wall-clock budget is spent, write its whole state to a file, and go on from that
file later in a fresh process, making exactly what one uninterrupted run makes: its state
is plain data (heaps, tables, counters, seeded random generators), and nothing in a run
depends on the process it runs in (string hashes change between processes, and no
result may follow a set's order already, since logs are byte-identical for a seed).

The file is a pickle, the standard library's serialiser of Python object graphs
(shared objects stay shared, so a payload sized once is still sized once). Reading a
pickle runs whatever code its author put in it, so a paused state is **not a format for
sharing**: every file is signed when it is written, with HMAC-SHA256 under a key of this
user on this machine (:func:`key_path`, 32 random bytes in a mode-0600 file made on
first use), and :func:`read_state` checks the signature over the whole file before one
byte of it is unpickled. A state from anywhere else (a received run folder, another
user, a file written before states were signed) is refused with :class:`StateRefused`
unless the caller trusts it explicitly. A file written by some code is read only by the
same code (:mod:`experiments.runs.simulated` checks a digest of the sources first).
Functions do not pickle: the caller hands the simulator's again on resume.

Layout: :data:`MAGIC`, the 32-byte tag, the pickle's length (8 bytes, little-endian),
the pickle, then the state's arrays (``array.array``: a peer's bucket runs, the
deliveries, per-link figures), each as its length (8 bytes) and its bytes, out of the
pickle's band. The tag is the HMAC of the magic line and all that follows it, worked
out in a streaming pass once the file is written, and checked in one before the load,
so neither side holds the file's bytes in memory beside the objects they stand for
(states reach gigabytes). Arrays go out of band because the unpickler keeps every
object it read until the whole state is read: an array read in band is made from bytes
that stay held beside it, twice its size meanwhile; out of band each is read from the
file when the pickle reaches it, and its bytes are let go at once.
"""

from __future__ import annotations

import copyreg
import gc
import hashlib
import hmac
import os
import pickle
import secrets
import stat
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO


@dataclass(frozen=True)
class Pause:
    """Stop at the first point between two events once ``time.perf_counter()`` reaches
    ``until`` (seconds, that clock's reading), and write the state to ``path``. A
    deadline rather than a budget, so that a caller's budget covers what it did before
    (reading the state it resumes from)."""

    until: float
    path: Path


class Paused(Exception):
    """The run paused: its state is in ``path``, ``done`` the share of its client
    operations carried out, ``t_s`` the simulated time it stopped at."""

    def __init__(self, path: Path, done: float, t_s: float) -> None:
        super().__init__(f"paused at {done:.0%} of the client operations, simulated "
                         f"time {t_s:.1f} s: state in {path}")
        self.path, self.done, self.t_s = path, done, t_s


# The version rises when what a state holds changes shape: v2 put the arrays out of band,
# v3 the simulation's engine and models in objects (and modules) of their own, v4 the
# hops of each operation's latest arrival and each buffered message's time in.
MAGIC = b"pubsublab paused state, HMAC-SHA256 signed, v4\n"
_TAG_BYTES = 32
_LENGTH_BYTES = 8
_HEAD_BYTES = len(MAGIC) + _TAG_BYTES + _LENGTH_BYTES  # then the pickle
_KEY_BYTES = 32
_KEY_FILE = "pause.key"
_CHUNK_BYTES = 16 * 2**20


class StateRefused(ValueError):
    """A paused state that is not read: unsigned, signed by another key, damaged, or not
    a file. The message is one line and names the file."""


def key_path() -> Path:
    """This user's signing key: ``$PUBSUBLAB_KEY_DIR/pause.key``, else under
    ``$XDG_STATE_HOME/pubsublab``, else ``~/.local/state/pubsublab`` (the XDG default).
    Under sudo the key is root's, so a state written under sudo resumes under sudo."""
    base = os.environ.get("PUBSUBLAB_KEY_DIR")
    if not base:
        xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        base = str(Path(xdg) / "pubsublab")
    return Path(base) / _KEY_FILE


def _key(create: bool) -> bytes:
    """The signing key, made (32 random bytes, mode 0600) if ``create`` and missing.
    StateRefused if it is missing, the wrong size, or open to other users (anyone who can
    read it can sign a state that runs code in this user's name)."""
    path = key_path()
    if create and not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it meanwhile: use that one
            pass
        else:
            with os.fdopen(fd, "wb") as fh:
                fh.write(secrets.token_bytes(_KEY_BYTES))
    try:
        st = path.stat()
        key = path.read_bytes()
    except OSError as exc:
        raise StateRefused(f"no pause key at {path} ({exc.strerror or exc}): no paused "
                           "state was written by this user on this machine") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise StateRefused(f"pause key {path} is open to other users (mode "
                           f"{stat.S_IMODE(st.st_mode):04o}): chmod 600 it, or remove it "
                           "(then states written so far are refused)")
    if len(key) != _KEY_BYTES:
        raise StateRefused(f"pause key {path} is not a key ({len(key)} bytes, wanted "
                           f"{_KEY_BYTES}): remove it (then states written so far are "
                           "refused)")
    return key


def _array_from(typecode: str, data: Any) -> array:
    """An array read back from its bytes (out of band: module docstring). The unpickler
    keeps this call's arguments until the whole state is read, so the bytes read for it
    (a bytearray, from :func:`_buffers`) are emptied here, and their memory let go."""
    out = array(typecode)
    out.frombytes(data)
    if isinstance(data, bytearray):
        data.clear()
    return out


def _reduce_array(arr: array) -> tuple[Any, tuple[str, pickle.PickleBuffer]]:
    return _array_from, (arr.typecode, pickle.PickleBuffer(arr))


def write_state(state: Any, path: Path) -> None:
    """Pickle ``state`` to ``path``, signed (module docstring), through a temporary file
    so that a run stopped while writing never leaves a half file under the name."""
    key = _key(create=True)
    tmp = path.with_name(path.name + ".part")
    buffers: list[pickle.PickleBuffer] = []  # views of the state's arrays, no copies
    try:
        with open(tmp, "w+b") as fh:
            fh.write(MAGIC + bytes(_TAG_BYTES + _LENGTH_BYTES))
            pickler = pickle.Pickler(fh, protocol=5, buffer_callback=buffers.append)
            pickler.dispatch_table = {**copyreg.dispatch_table, array: _reduce_array}
            pickler.dump(state)
            del pickler  # its memo: an entry per object of the state
            end = fh.tell()
            for buf in buffers:
                with buf.raw() as view:
                    fh.write(view.nbytes.to_bytes(_LENGTH_BYTES, "little"))
                    fh.write(view)
            buffers.clear()
            fh.seek(len(MAGIC) + _TAG_BYTES)
            fh.write((end - _HEAD_BYTES).to_bytes(_LENGTH_BYTES, "little"))
            fh.seek(len(MAGIC) + _TAG_BYTES)
            mac = hmac.new(key, MAGIC, hashlib.sha256)
            while chunk := fh.read(_CHUNK_BYTES):
                mac.update(chunk)
            fh.seek(len(MAGIC))
            fh.write(mac.digest())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def check_state(path: Path, *, trust: bool = False) -> None:
    """StateRefused unless ``path`` is a state this user's key signed (with ``trust``:
    unless it is a file that can be read), checked as :func:`read_state` checks it,
    nothing unpickled: a caller checks before it says or starts anything (0.7 s per GiB
    of state here), and :func:`read_state` checks again."""
    with _opened(path) as fh:
        if not trust:
            _verify(fh, path)


def read_state(path: Path, *, trust: bool = False) -> Any:
    """The object :func:`write_state` wrote to ``path``, once its signature is checked
    against this user's key: StateRefused otherwise, nothing unpickled. With ``trust``
    the signature is not checked (the caller vouches for the file: any code in it runs),
    and a plain pickle without the signed header is read too.

    The file is checked and loaded through one open descriptor, so renaming another
    file into its place meanwhile changes nothing. The collector is off while loading:
    reading builds tens of millions of objects and no garbage, and each collection of
    the older generations would walk all that is built so far."""
    with _opened(path) as fh:
        head = fh.read(_HEAD_BYTES)
        signed = head.startswith(MAGIC) and len(head) == _HEAD_BYTES
        if not trust:
            fh.seek(0)
            _verify(fh, path)
        fh.seek(len(head) if signed else 0)
        buffers = (_buffers(fh.fileno(), _HEAD_BYTES + int.from_bytes(head[-_LENGTH_BYTES:],
                                                                      "little"))
                   if signed else None)
        enabled = gc.isenabled()
        gc.disable()
        try:
            return pickle.load(fh, buffers=buffers)
        except Exception as exc:  # a trusted file may still be damaged: one line
            raise StateRefused(f"{path}: not a readable paused state "
                               f"({type(exc).__name__}: {exc})") from None
        finally:
            if enabled:
                gc.enable()


def _buffers(fd: int, at: int) -> Iterator[bytearray]:
    """The out-of-band arrays' bytes from offset ``at`` of the file open as ``fd``, one
    at a time as the unpickler asks (read by offset: the pickle is read meanwhile)."""
    while True:
        size = int.from_bytes(os.pread(fd, _LENGTH_BYTES, at), "little")
        data = bytearray(size)
        view, got = memoryview(data), 0
        while got < size:  # a read returns at most 2 GiB
            n = os.preadv(fd, [view[got:]], at + _LENGTH_BYTES + got)
            if not n:
                raise ValueError("the file ends inside an array")
            got += n
        view.release()
        at += _LENGTH_BYTES + size
        yield data


def _opened(path: Path) -> BinaryIO:
    """``path`` open for reading; StateRefused in one line if it cannot be (missing, a
    folder, unreadable)."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 -- the callers close it
        fh.read(0)  # a folder opens, and fails only here
        return fh
    except OSError as exc:
        raise StateRefused(f"{path}: cannot be read as a paused state "
                           f"({exc.strerror or exc})") from None


def _verify(fh: BinaryIO, path: Path) -> None:
    """StateRefused unless the file open at its start in ``fh`` carries the signed
    header and its tag is the HMAC of the rest under this user's key (streamed: the
    file's bytes are never held whole)."""
    head = fh.read(len(MAGIC) + _TAG_BYTES)
    if not head.startswith(MAGIC) or len(head) != len(MAGIC) + _TAG_BYTES:
        raise StateRefused(f"{path}: not a signed paused state (written elsewhere, "
                           "damaged, or from before states were signed)")
    try:
        key = _key(create=False)
    except StateRefused as exc:
        raise StateRefused(f"{path}: not checked: {exc}") from None
    mac = hmac.new(key, MAGIC, hashlib.sha256)
    while chunk := fh.read(_CHUNK_BYTES):
        mac.update(chunk)
    if not hmac.compare_digest(mac.digest(), head[len(MAGIC):]):
        raise StateRefused(f"{path}: its signature is not this machine's (written by "
                           f"another user or machine, or changed since; key {key_path()})")
