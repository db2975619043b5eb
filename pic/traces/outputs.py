"""What pic writes, and what it never touches (DESIGN.md §11): the one output-safety helper.

Every command that writes (``ingest``, ``synth``, ``replay``, ``report``, ``sweep``, ``execute``,
``calibrate``, ...) follows the same three steps::

    from pic.traces.outputs import atomic_dir, atomic_path, check_output, is_pic_trace

    # 1. before any work starts: refuse unsafe outputs with a one-line OutputError
    check_output(out, inputs=[trace_path, model_path], force=force, kind="file", own=is_pic_trace)
    ...                                   # the work
    # 2a. a single file: a temp name in the same folder, renamed into place only when complete
    with atomic_path(out) as tmp:
        write(tmp)
    # 2b. a folder of pic's files (a run dir): built in a temp folder, then moved in file by file
    with atomic_dir(run_dir, kind="run-dir", force=force, inputs=[trace_path]) as tmp:
        write(tmp / "summary.json")

Rules (checked by :func:`check_output`, and again at commit by :func:`atomic_dir`):

- an output that is an input of the same command is refused: the same file (through symlinks, relative
  paths and hard links), the same folder, or a folder containing an input. ``--force`` never overrides this.
- an existing file is refused unless it is pic's own output of the same kind (``own(path)``: a pic trace,
  a pic report) or ``force`` is given. Something that is not a regular file (a folder, a pipe, a device)
  is never replaced.
- an existing folder is written into only when it is empty, or carries pic's marker file
  :data:`MARKER` (``.pic-output``: JSON naming the folder kind and the files pic wrote there), or
  ``force`` is given. Even then only pic's own files are replaced or removed: a file of the same name
  that pic did not write is refused, with or without ``force``; anything else in the folder is untouched.
- a file is never replaced by a folder, nor a folder by a file.

Temporary names are ``.<name>.<pid>.<random>.pic-tmp``, so a later run removes the leftovers of a run
that was killed (SIGKILL, power loss) once their process is gone (:func:`remove_stale_temps`).
Errors are :class:`OutputError` (a ``ValueError``): one line naming the path and the way out.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

#: marker file of a folder pic owns: ``{"pic": KIND, "version": 1, "files": [names pic wrote]}``
MARKER = ".pic-output"
#: folder kinds pic writes (a run dir of ``pic replay``, a sweep dir, a folder of report plots, ...)
DIR_KINDS = ("run-dir", "sweep-dir", "plots", "dir")
TMP_SUFFIX = ".pic-tmp"
#: run dirs written before the marker existed are recognised by these files (summary.json is pic's)
_LEGACY = {"run-dir": ("summary.json", ("config.json", "requests.parquet", "summary.json")),
           "sweep-dir": ("sweep.json", ("sweep.json",))}
#: temp names of older versions (``tempfile.mkstemp``: 8 random characters), removed when old enough
_LEGACY_TMP_AGE_S = 3600.0

PARQUET_MAGIC = b"PAR1"


class OutputError(ValueError):
    """An output pic refuses to write. ``str(err)`` is one line naming the path and the way out."""


# ---- Public API -----------------------------------------------------------------------------------

def check_output(path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike | None] = (),
                 force: bool = False, kind: str = "file", own: Callable[[Path], bool] | None = None,
                 names: Iterable[str] = (), option: str = "output") -> Path:
    """Refuse an unsafe output before any work starts; returns ``path`` as a :class:`Path`.

    ``inputs``: every path the command reads (files or folders; ``None`` and names that are not
    paths are ignored). ``kind``: ``"file"`` or a folder kind of :data:`DIR_KINDS`. ``own(path)``
    says whether an existing file is pic's own output of this kind (see :func:`is_pic_trace`,
    :func:`is_pic_report`). ``names``: files a folder output will hold, when known in advance, so that
    a clash with a file pic did not write is refused now rather than after the work. ``option``: the
    option the path came from, used in messages (``--output``, ``--html``). Raises :class:`OutputError`.
    """
    p = Path(path)
    shown = f"{option} {p}" if option else str(p)
    _check_not_input(p, inputs, shown)
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise OutputError(f"{shown}: a parent of this path is a file, not a folder; choose another path") from None
    except OSError as e:
        raise OutputError(f"{shown}: cannot check this path: {_reason(e)}") from None
    if kind == "file":
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise OutputError(f"{shown}: is a folder; give a file name")
            if not stat.S_ISREG(st.st_mode):
                raise OutputError(f"{shown}: exists and is not a regular file (a pipe or a device); "
                                  "pic writes regular files only: give a file path")
            if not force and not (own is not None and _safe_own(own, p)):
                raise OutputError(f"{shown}: exists and was not written by pic; pass --force to replace it, "
                                  "or choose another name")
    elif kind in DIR_KINDS:
        if st is not None:
            if not stat.S_ISDIR(st.st_mode):
                raise OutputError(f"{shown}: exists and is not a folder; pic never replaces a file by a "
                                  "folder: choose another path")
            owned = pic_files(p, kind)
            if owned is None and not force and _entries(p):
                raise OutputError(f"{shown}: folder is not empty and was not written by pic; pass --force to "
                                  "add pic's files to it (nothing else in it is touched), or choose a new folder")
            clash = [n for n in names if n not in (owned or ()) and os.path.lexists(p / n)]
            if clash:
                raise OutputError(f"{shown}: {p / clash[0]} exists and was not written by pic; move it away "
                                  "or choose another folder (--force never replaces it)")
    else:
        raise ValueError(f"check_output: unknown kind {kind!r} (file, {', '.join(DIR_KINDS)})")
    _check_parent(p, shown)
    return p


def check_distinct(outputs: dict[str, str | os.PathLike | None]) -> None:
    """Refuse two outputs of one command that are the same path: ``{"--html": p1, "--md": p2}``."""
    seen: dict[Path, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        r = resolve(path)
        if r in seen:
            raise OutputError(f"{option} {path}: is also the {seen[r]} output; give each output its own path")
        seen[r] = option


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path next to ``path``; rename it onto ``path`` only if the block succeeds.

    The temp file is removed on any failure, Ctrl-C or SIGTERM (the CLI turns those into exceptions).
    Errors name ``path``, never the temp name. Safety checks are :func:`check_output`'s job.
    """
    path = Path(path)
    _make_parent(path)
    remove_stale_temps(path)
    tmp = path.parent / _tmp_name(path.name)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for any file
    except OSError as e:
        raise OutputError(f"{path}: cannot write: {_reason(e)} (folder {path.parent})") from None
    os.close(fd)
    try:
        yield tmp
        try:
            if path.is_dir() and not path.is_symlink():
                raise OutputError(f"{path}: is a folder now; nothing was written")
            os.replace(tmp, path)
        except OSError as e:
            raise OutputError(f"{path}: cannot write: {_reason(e)}") from None
    except BaseException:
        _unlink(tmp)
        raise


@contextmanager
def atomic_dir(path: str | os.PathLike, *, kind: str = "run-dir", force: bool = False,
               inputs: Iterable[str | os.PathLike | None] = (), last: Iterable[str] = ("summary.json",)
               ) -> Iterator[Path]:
    """Yield a temp folder next to ``path``; when the block succeeds its files become ``path``'s.

    A new or empty ``path``: the temp folder is renamed into place whole. An existing folder (one pic
    wrote, or any folder under ``force``): pic's previous files listed in its :data:`MARKER` are removed
    and the new ones moved in (``last`` ones at the end, the marker listing them before and after), so
    nothing pic did not write is touched. The rules of :func:`check_output` are checked again here
    (before the block runs). The temp folder is removed on any failure.
    """
    path = Path(path)
    if kind not in DIR_KINDS:
        raise ValueError(f"atomic_dir: unknown kind {kind!r} ({', '.join(DIR_KINDS)})")
    check_output(path, inputs=inputs, force=force, kind=kind, option="")
    _make_parent(path)
    remove_stale_temps(path)
    tmp = path.parent / _tmp_name(path.name)
    try:
        os.mkdir(tmp)
    except OSError as e:
        raise OutputError(f"{path}: cannot write: {_reason(e)} (folder {path.parent})") from None
    try:
        yield tmp
        names = sorted(p.name for p in tmp.iterdir() if p.name != MARKER)
        _write_marker(tmp, kind, names)
        try:
            _commit_dir(tmp, path, kind, force, names, tuple(last))
        except OSError as e:
            raise OutputError(f"{path}: cannot write: {_reason(e)}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(tmp, ignore_errors=True)


def claim_dir(path: str | os.PathLike, kind: str, names: Iterable[str]) -> Path:
    """Create folder ``path`` if needed and record ``names`` as pic's files in its marker (merged with
    those already recorded). For folders pic fills over time (a sweep dir); call :func:`check_output`
    first."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    old = pic_files(path, kind) or ()
    _write_marker(path, kind, sorted({*old, *names}))
    return path


def pic_files(path: str | os.PathLike, kind: str) -> tuple[str, ...] | None:
    """Names of the files pic wrote in folder ``path`` (of ``kind``), or None when pic does not own it."""
    path = Path(path)
    marker = path / MARKER
    try:
        doc = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and doc.get("pic") == kind and isinstance(doc.get("files"), list):
        return tuple(n for n in doc["files"] if isinstance(n, str) and _plain_name(n))
    if kind in _LEGACY and not marker.exists():
        key, files = _LEGACY[kind]
        try:
            legacy = json.loads((path / key).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return None
        if isinstance(legacy, dict) and "version" in legacy and ("policies" in legacy or "cells" in legacy):
            return files
    return None


def is_parquet(path: str | os.PathLike) -> bool:
    """True if ``path`` is a regular file that starts and ends with Parquet's magic bytes (a pipe is never
    opened: reading would consume it, or block)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            if f.read(4) != PARQUET_MAGIC:
                return False
            f.seek(-4, os.SEEK_END)
            return f.read(4) == PARQUET_MAGIC
    except OSError:
        return False


def is_stream(path: str | os.PathLike) -> bool:
    """True if ``path`` is a pipe or a character device (``<(cat f)``, ``/dev/stdin``): readable once."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def is_pic_trace(path: str | os.PathLike) -> bool:
    """True if ``path`` is a Parquet file with pic's schema version in its metadata."""
    if not is_parquet(path):
        return False
    try:
        import pyarrow.parquet as pq

        return b"pic.schema_version" in (pq.read_schema(path).metadata or {})
    except Exception:  # noqa: BLE001 - pyarrow raises several types on damaged files
        return False


#: what marks a report written by ``pic report`` within its first 512 bytes (HTML, Markdown)
REPORT_SIGNATURES = (b'<meta name="generator" content="pic report">', b"<!-- generated by pic report -->")


def is_pic_report(path: str | os.PathLike) -> bool:
    """True if ``path`` is an HTML or Markdown report written by ``pic report``."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return any(sig in head for sig in REPORT_SIGNATURES)


def derived_outputs(run_dir: str | os.PathLike) -> list[Path]:
    """What ``pic report`` wrote inside run dir ``run_dir`` (``--html``/``--md`` files, ``--plots`` folders),
    sorted: made from the run then, kept (never removed) by a replay that replaces it."""
    d = Path(run_dir)
    own = set(pic_files(d, "run-dir") or ())
    out = []
    try:
        entries = sorted(os.scandir(d), key=lambda e: e.name)
    except OSError:
        return []
    for e in entries:
        if e.name in own or e.name == MARKER or e.is_symlink():
            continue
        try:
            if e.is_file() and e.name.endswith((".html", ".htm", ".md")) and is_pic_report(e.path):
                out.append(Path(e.path))
            elif e.is_dir() and pic_files(e.path, "plots") is not None:
                out.append(Path(e.path))
        except OSError:
            continue
    return out


def resolve(path: str | os.PathLike) -> Path:
    """Absolute path with every symlink resolved (the part that exists) and ``..`` collapsed."""
    return Path(os.path.realpath(os.path.abspath(os.fspath(path))))


def remove_stale_temps(path: str | os.PathLike) -> int:
    """Remove temp files/folders of ``path`` that a killed pic run left behind; returns how many.

    Only pic's own naming is touched: ``.<name>.<pid>.<random>.pic-tmp`` whose process is gone, and
    the older ``.<name>.<8 characters>.tmp`` when more than an hour old.
    """
    path = Path(path)
    try:
        entries = os.listdir(path.parent)
    except OSError:
        return 0
    new = re.compile(re.escape(f".{_utf8(path.name)}.") + r"(\d+)\.[0-9a-f]{8}" + re.escape(TMP_SUFFIX) + "$")
    old = re.compile(re.escape(f".{path.name}.") + r"[A-Za-z0-9_]{8}\.tmp$")
    removed = 0
    now = time.time()
    for name in entries:
        m = new.match(name)
        stale = False
        if m:
            stale = not _alive(int(m.group(1)))
        elif old.match(name):
            try:
                stale = now - os.lstat(path.parent / name).st_mtime > _LEGACY_TMP_AGE_S
            except OSError:
                stale = False
        if stale:
            target = path.parent / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            else:
                _unlink(target)
            removed += 1
    return removed


def os_error_message(e: OSError, path: str | os.PathLike | None = None) -> str:
    """One line for an ``OSError``: ``<path>: <reason>`` (the path given, else the one in the error)."""
    where = path if path is not None else (e.filename if e.filename is not None else None)
    return f"{where}: {_reason(e)}" if where is not None else _reason(e)


# ---- Internal helpers -----------------------------------------------------------------------------

def _reason(e: OSError) -> str:
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if e.errno == errno.EROFS:
        return "read-only file system"
    if e.errno == errno.ENOSPC:
        return "no space left on the device"
    if e.errno == errno.EDQUOT:
        return "disk quota exceeded"
    if e.errno == errno.ENAMETOOLONG:
        return "file name too long"
    return e.strerror.lower() if e.strerror else str(e) or type(e).__name__


def _check_not_input(out: Path, inputs: Iterable[str | os.PathLike | None], shown: str) -> None:
    ro = resolve(out)
    for inp in inputs:
        if inp is None:
            continue
        try:
            ri = resolve(inp)
        except (OSError, ValueError):
            continue
        if not os.path.lexists(ri) and not os.path.lexists(inp):
            continue   # a preset name such as a model, not a path
        if ri == ro or _same_file(out, inp):
            raise OutputError(f"{shown}: is an input of this command ({inp}); write the output somewhere else")
        if ro in ri.parents:
            raise OutputError(f"{shown}: contains an input of this command ({inp}); write the output "
                              "somewhere else")


def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _safe_own(own: Callable[[Path], bool], path: Path) -> bool:
    try:
        return bool(own(path))
    except Exception:  # noqa: BLE001 - a recogniser that fails means "not recognised"
        return False


def _entries(path: Path) -> list[str]:
    """Folder entries that count as content (pic's stale temp files do not)."""
    try:
        names = os.listdir(path)
    except OSError as e:
        raise OutputError(f"{path}: cannot list this folder: {_reason(e)}") from None
    return [n for n in names if not n.endswith(TMP_SUFFIX)]


def _check_parent(path: Path, shown: str) -> None:
    parent = path.parent
    while not parent.exists():
        if parent.parent == parent:
            return
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(f"{shown}: {parent} is a file, not a folder; choose another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{shown}: cannot write into {parent}: permission denied")


def _make_parent(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"{path}: a parent of this path is a file, not a folder") from None
    except OSError as e:
        raise OutputError(f"{path}: cannot create its folder: {_reason(e)}") from None


def _tmp_name(name: str) -> str:
    return f".{_utf8(name)}.{os.getpid()}.{os.urandom(4).hex()}{TMP_SUFFIX}"   # (secrets.token_hex(4); no hmac import)


def _utf8(name: str) -> str:
    """``name`` with undecodable bytes replaced: temp names must pass through libraries that need UTF-8."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True   # someone else's process (or an odd number): leave its files alone
    return True


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError:
        pass


def _plain_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..", MARKER)


def _write_marker(folder: Path, kind: str, names: list[str]) -> None:
    doc = {"pic": kind, "version": 1, "files": list(names)}
    with atomic_path(folder / MARKER) as tmp:
        tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def _commit_dir(tmp: Path, path: Path, kind: str, force: bool, names: list[str], last: tuple[str, ...]) -> None:
    if not os.path.lexists(path):
        os.rename(tmp, path)
        return
    if not path.is_dir():
        raise OutputError(f"{path}: is not a folder now; nothing was written")
    old = pic_files(path, kind)
    if old is None:
        if _entries(path) and not force:
            raise OutputError(f"{path}: folder is not empty and was not written by pic; pass --force to add "
                              "pic's files to it (nothing else in it is touched), or choose a new folder")
        old = ()
    clash = [n for n in names if n not in old and os.path.lexists(path / n)]
    if clash:
        raise OutputError(f"{path / clash[0]}: exists and was not written by pic; move it away or choose "
                          "another folder (--force never replaces it)")
    if not _entries(path) and not os.path.lexists(path / MARKER):
        try:
            os.rename(tmp, path)   # an empty folder is replaced whole (atomic)
            return
        except OSError:
            pass
    # the marker claims old and new names first, so an interruption leaves nothing pic cannot reclaim
    _write_marker(path, kind, sorted({*old, *names}))
    for n in old:
        target = path / n
        if target.is_file() or target.is_symlink():
            target.unlink()
    order = [n for n in names if n not in last] + [n for n in names if n in last]
    for n in order:
        os.replace(tmp / n, path / n)
    _write_marker(path, kind, names)
