"""Optional compiled kernels for the per-token hot paths (numba; the ``fast`` extra). Same results as the
numpy paths, bit for bit (tested both ways): the numpy code stays the reference and the fallback.

Two loops dominate a content-addressed replay of large traces (``irminsul`` on Mooncake: ~90 M prompt tokens
derived and chunked), and numpy spends ~10-20 passes and ~25 calls per prompt on them:

* deriving opaque tokens (:func:`traces.content.opaque_run`: splitmix64 per token);
* the Gear hash's candidate cuts (:func:`engine.cdc._natural`: a Gear value per token and 6 shift+add passes).

The kernels come in groups, each a module loaded on its first use (``kernels(n, group)``; the ``"cdc"`` group's
kernels each on their own first use, :func:`lazy`): the main module
:mod:`pic._accel_numba` (opaque tokens; every group needs it), ``"cdc"`` (the Gear scan, layouts and chunk
fingerprints of ``irminsul`` and ``linearkv``; the fingerprints in :mod:`pic._accel_numba_xxh`, which it imports), ``"fixed"`` (``fixed-chunk``: prefix hashes of a prompt made
from its segments, the window scan against its two filters over 512 KB bitsets, the filter insert; the
``oracle`` policy's window hashes too), ``"oracle"`` (the ``oracle`` policy's window index as a hash table),
``"irm"`` (``irminsul``'s prefilter key tables, loaded only once its walks are long: :mod:`pic._accel_numba_irm`),
``"rdr"`` (``rdr``'s blocks and greedy allocation), ``"rdrsel"`` (``rdr``'s allocation for every distinct case of
a told replay at once), ``"serve"`` (the compiled two-pass serving timeline), ``"tally"`` (``irminsul`` told) and
``"lkvtally"`` (``linearkv`` told, one pass). Shared pieces with no kernel of their own: :mod:`pic._accel_numba_table`
(the open-addressing ``uint64`` table), :mod:`pic._accel_numba_psum` (numpy's pairwise sum, for ``rdr``).

NOTE (cost of the accelerator itself): importing numba and loading the cached machine code costs ~0.2-0.3 s
CPU per process (the first import after an install compiles them: ~10-17 s, once, on the loaded 2-core VM);
they save ~30-100 ns per token. So by default (``auto``) they load only once the numpy paths have seen
``AUTO_TOKENS`` tokens in this process (about what the load costs, spent in numpy): runs on small traces
(tests, samples) never pay for it.
A policy about to chunk a trace's content announces its distinct tokens with one ``kernels(n)`` call, so a
large trace loads them up front. ``PIC_ACCEL=0`` turns them off, ``PIC_ACCEL=1`` loads them on the first
call; without numba everything runs the numpy paths.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType

AUTO_TOKENS = 1 << 22

_state: dict = {"mode": None, "seen": 0, "mod": None, "failed": False, "groups": {}}


def set_mode(mode: str | None) -> None:
    """``"0"`` (numpy only), ``"1"`` (compiled from the first call), ``"auto"``; None: from ``PIC_ACCEL``
    again. Resets the token count (tests)."""
    if mode not in (None, "0", "1", "auto"):
        raise ValueError(f"accel mode must be 0, 1 or auto, got {mode!r}")
    _state.update(mode=mode, seen=0)


def mode() -> str:
    m = _state["mode"]
    if m is None:
        m = os.environ.get("PIC_ACCEL", "auto").strip() or "auto"
        if m not in ("0", "1", "auto"):
            m = "auto"
        _state["mode"] = m
    return m


def kernels(num_tokens: int, group: str | None = None) -> ModuleType | None:
    """The compiled kernels (:mod:`pic._accel_numba`) for a call over ``num_tokens`` tokens, or None: use the
    numpy path (mode ``0``, numba absent or failing, or ``auto`` below ``AUTO_TOKENS`` tokens seen so far).
    ``group`` names a module of kernels (``"cdc"``, ``"fixed"``, ``"irm"``, ``"oracle"``, ``"rdr"``, ...:
    :mod:`pic._accel_numba_<group>`), loaded on its first use; one that fails to load answers None (the numpy
    path) like the main module."""
    mod = _kernels(num_tokens)
    if mod is None or group is None:
        return mod
    g = _state["groups"].get(group, 0)
    if g == 0:
        g = _state["groups"][group] = _load(f"pic._accel_numba_{group}")
    return g


def _kernels(num_tokens: int) -> ModuleType | None:
    mod = _state["mod"]
    if mod is not None:
        m = _state["mode"] or mode()
        return None if m == "0" else mod
    m = mode()
    if m == "0" or _state["failed"]:
        return None
    _state["seen"] += num_tokens
    if m == "auto" and _state["seen"] < AUTO_TOKENS:
        return None
    mod = _load()
    if mod is None:            # numba absent, or no compiler for this platform: the numpy paths
        _state["failed"] = True
        return None
    _state["mod"] = mod
    return mod


def loaded() -> bool:
    """Whether the compiled kernels are loaded already in this process (their load paid)."""
    return _state["mod"] is not None


def available() -> bool:
    """Whether the compiled kernels load here (loads them)."""
    return _load() is not None


def _load(name: str = "pic._accel_numba") -> ModuleType | None:
    """Import the kernel module ``name`` (None where it fails: numba absent, no compiler).

    NOTE (speed): numba probes ``scipy.linalg`` for a BLAS (np.dot in jitted code) when its numpy support
    loads: ~0.3 s CPU of scipy imports where scipy is installed. The kernels use no BLAS, so while they
    load ``scipy.linalg`` is hidden (numba then records "no BLAS"); it is importable again afterwards.
    Likewise ``cffi`` (~0.035 s CPU to import and set up), which numba's typing probes for its cffi support
    (no kernel calls a cffi function), and ``scipy`` itself (~0.01 s), imported by numba only to check its
    version. So are ``yaml`` (~0.01 s; numba reads a ``.numba_config.yaml`` with it: not hidden where one exists)
    and ``colorama`` (numba's coloured error messages).

    NOTE (speed): loading a cached kernel, numba first refreshes its target context: it imports and registers
    every implementation it could need to *compile* (~60 modules of numba.cpython, numba.np, numba.typed,
    ...) and scans the installed distributions for numba extensions: ~0.14 CPU s of the ~0.35 s load. Loading
    machine code from the cache needs none of that but the runtime (NRT: the kernels allocate arrays), so
    while the kernels load, a cache hit initializes only the runtime (:func:`_cached_overloads`); a miss (the
    first import after an install or an edit) compiles as before (numba's compiler refreshes the contexts
    itself). Tested: the kernels give what the numpy paths give (tests/test_accel.py, tests/test_accel_cdc.py),
    in a fresh process too."""
    from importlib import import_module

    try:
        with _loading():
            mod = import_module(name)
    except Exception:
        return None
    _plain_typeof()
    return mod


@contextmanager
def _loading() -> Iterator[None]:
    """While kernels load (:func:`_load`, :func:`lazy`): the modules numba probes but the kernels do not need
    hidden, cached machine code loaded without refreshing numba's contexts (:func:`_cached_overloads`)."""
    hidden = [m for m in _HIDDEN if m not in sys.modules]
    if "yaml" in hidden and os.path.exists(".numba_config.yaml"):
        hidden.remove("yaml")
    for m in hidden:
        sys.modules[m] = None  # type: ignore[assignment]
    try:
        with _cached_overloads():
            yield
    finally:
        for m in hidden:
            if sys.modules.get(m, 0) is None:
                del sys.modules[m]


def lazy(g: dict, sigs: dict, opts: dict, more: dict | None = None) -> Callable[[str], object]:
    """A kernel module's ``__getattr__``: each function of its globals ``g`` named in ``sigs`` leaves ``g`` and is
    compiled with its signature (``njit(sig, **opts)``: cached machine code loaded, as an eager ``@njit(sig)``
    would at import) on the module's first access of the name; ``more``: names served by another module (its
    attribute, on first access).

    NOTE (speed): a group's module loads only the kernels a run calls: loading one costs ~3-25 ms CPU, and
    ``irminsul`` calls one of the ``"cdc"`` group's ten on opaque prompts (``prompt_layout``). A kernel that
    another kernel calls is called there through a signature-free dispatcher of the same function (compiled for
    the caller's types only when the caller itself compiles: a cache hit loads the caller's machine code alone)."""
    funcs = {name: g.pop(name) for name in sigs}

    def getattr_(name: str) -> object:
        if name in funcs:
            from numba import njit

            with _loading():
                kernel = njit(sigs[name], **opts)(funcs[name])
            g[name] = kernel
            return kernel
        if more and name in more:
            g[name] = got = getattr(more[name], name)
            return got
        raise AttributeError(f"module {g['__name__']!r} has no attribute {name!r}")
    return getattr_


_HIDDEN = ("scipy", "scipy.linalg", "cffi", "yaml", "colorama")


def _plain_typeof() -> None:
    """numba's typing of an argument that is an ndarray (``typeof_impl``'s, at a kernel's first call with arrays of
    each kind) asks whether it is a ``numpy.ma.MaskedArray``, which imports ``numpy.ma``; for an array whose type is
    ``np.ndarray`` itself (a MaskedArray is a subclass: never one) it is asked with ``np.ma`` a stand-in whose
    ``MaskedArray`` nothing is an instance of, where ``numpy.ma`` is not imported yet; anything else as numba does.
    Once per process; where numba's internals are not as expected, nothing changes.

    NOTE (speed): the import (~25 ms CPU: its ufunc wrappers' signatures parsed) was most of the ~30 ms of a
    process's first kernel call (Mooncake conversation's serve_one: 35 -> 5 ms); nothing else in a replay imports it."""
    if _state.get("typeof"):
        return
    _state["typeof"] = True
    try:
        import numpy as np
        from numba.core.typing.typeof import typeof_impl
        orig = typeof_impl.dispatch(np.ndarray)
        if getattr(orig, "__name__", "") != "_typeof_ndarray":
            return
    except Exception:      # numba's internals other than expected
        return
    stand_in = ModuleType("numpy.ma")
    stand_in.MaskedArray = type("NotMasked", (), {})    # type: ignore[attr-defined]

    def typeof_ndarray(val, c):
        if type(val) is not np.ndarray or "numpy.ma" in sys.modules or "ma" in vars(np):
            return orig(val, c)
        np.ma = stand_in
        try:
            return orig(val, c)
        finally:
            del np.ma

    typeof_impl.register(np.ndarray)(typeof_ndarray)


@contextmanager
def _cached_overloads() -> Iterator[None]:
    """While it is active, numba loads a cached kernel without refreshing its contexts (the runtime only; see
    :func:`_load`). Where numba's internals are not as expected, nothing changes."""
    try:
        from numba.core import caching, environment
        from numba.core.runtime import nrt
        cache = caching.Cache
        orig, orig_env = cache.load_overload, environment._rebuild_env
        if not (hasattr(cache, "_load_overload") and hasattr(cache, "_guard_against_spurious_io_errors")
                and hasattr(nrt, "rtsys") and hasattr(environment, "lookup_environment")):
            raise AttributeError("numba internals")
    except Exception:      # numba absent (the import then fails as before) or other than expected
        yield
        return

    def load_overload(self, sig, target_context):
        _runtime(target_context)
        got = None
        with self._guard_against_spurious_io_errors():
            got = self._load_overload(sig, target_context)
        if got is None:            # a miss: compiled next, as numba does it (contexts refreshed)
            _compiling()
            target_context.refresh()
        return got

    def rebuild_env(modname, consts, env_name):
        """numba's ``_rebuild_env`` (a cached function's environment, unpickled), but a module not imported yet
        is not imported for it: the environment gets empty globals (read only by object-mode code; the kernels
        are nopython). NOTE (speed): the kernels' inlined array helpers name ``numba.np.arrayobj`` there, whose
        import (with ``numba.cpython.charseq`` and ``unicode``) was ~0.026 s of ``prompt_layout``'s ~0.047 s load."""
        mod = sys.modules.get(modname)
        if mod is not None or environment.lookup_environment(env_name) is not None:
            return orig_env(modname, consts, env_name)
        env = environment.Environment({})
        env.consts[:] = consts
        env.env_name = env_name
        environment.Environment._memo[env_name] = env
        return env

    cache.load_overload, environment._rebuild_env = load_overload, rebuild_env
    try:
        yield
    finally:
        cache.load_overload, environment._rebuild_env = orig, orig_env


def _compiling() -> None:
    """One line on stderr, once per process, where a kernel is not in numba's cache (the first run after an install
    or an edit compiles them for ~10-25 s, silent otherwise); only on an interactive terminal (a pipe, a log or a
    test reading stderr gets nothing)."""
    if _state.get("told"):
        return
    _state["told"] = True
    try:
        if sys.stderr is not None and sys.stderr.isatty():
            print("pic: compiling kernels once (about 20 s; cached for later runs) ...", file=sys.stderr, flush=True)
    except (AttributeError, OSError, ValueError):
        pass


_RUNTIME_DIR: str | None = None     # where the runtime's machine code is kept (None: beside the kernels'; tests)


def _runtime(ctx) -> None:
    """numba's runtime (NRT) initialized as ``rtsys.initialize(ctx)`` does it, its compiled functions loaded from a
    cache file beside the kernels' (written on the first load: a miss compiles them, as numba does).

    NOTE (speed): numba compiles the runtime's few LLVM functions (reference counts, atomics) in every process
    that loads a kernel: ~0.036 CPU s, against ~0.003 s to load their machine code. The file's name holds what
    the code depends on (numba's and llvmlite's versions, the target triple, CPU name and features: what numba
    keys its own cache on); one it cannot read or load is compiled over; where none can be written, the runtime
    is compiled each time as before. Where numba's internals are not as expected: ``rtsys.initialize``."""
    from numba.core.runtime import nrt

    rt = nrt.rtsys
    if rt._init:
        return
    try:
        import hashlib
        import pickle

        import llvmlite
        import numba
        from llvmlite import binding as ll
        from numba.core import config
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.runtime import _nrt_python, nrtdynmod
        codegen = ctx.codegen()
        key = repr(("pic-nrt/1", numba.__version__, llvmlite.__version__, codegen.magic_tuple())).encode()
        base = _RUNTIME_DIR or config.CACHE_DIR or os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__")
        path = os.path.join(base, f"_accel_nrt.{hashlib.sha1(key).hexdigest()[:16]}.nbo")
        helpers = _nrt_python.c_helpers
        make = nrtdynmod.create_nrt_module
    except Exception:        # numba's internals other than expected
        rt.initialize(ctx)
        return
    with global_compiler_lock:
        if rt._init:
            return
        if config.NRT_STATS:
            _nrt_python.memsys_enable_stats()
        for name, address in helpers.items():           # (as rtsys.initialize registers them)
            ll.add_symbol(name if name.startswith("_") else "NRT_" + name, address)
        library = None
        try:
            with open(path, "rb") as f:
                library = codegen.unserialize_library(pickle.load(f))
        except Exception:    # none yet, or unreadable: compiled (and written)
            library = None
        if library is None:
            ir_mod, library = make(ctx)
            library.enable_object_caching()
            library.add_ir_module(ir_mod)
            library.finalize()
            try:
                os.makedirs(base, exist_ok=True)
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "wb") as f:
                    pickle.dump(library.serialize_using_object_code(), f)
                os.replace(tmp, path)
            except OSError:
                pass
        rt._library = library
        rt._init = True
