"""Packaging: the simulator runs without torch/triton (they come with the ``gpu`` extra), the wheel installs one
top-level package (``pic``), and Hugging Face's ``kernels`` package imports beside it."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "traces" / "samples" / "early-variation.parquet"
HEAVY = ("torch", "triton")

#: a ``sitecustomize`` that makes torch and triton unimportable, and records every attempt
_BLOCKER = textwrap.dedent("""
    import importlib.abc, os, sys

    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("torch", "triton"):
                with open(os.environ["PIC_TEST_BLOCKED_LOG"], "a") as f:
                    f.write(name + "\\n")
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
            return None

    sys.meta_path.insert(0, _Block())
""")


def _run_blocked(args: list[str], tmp: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    site = tmp / "blocker"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_BLOCKER)
    log = tmp / "blocked.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "PIC_TEST_BLOCKED_LOG": str(log),
           "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, *args], cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    return proc, (log.read_text().split() if log.exists() else [])


def test_dependencies_are_light() -> None:
    """The base install lists no torch/triton/GPU package; the gpu extra carries them."""
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = {d.split(";")[0].split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().lower()
             for d in meta["dependencies"]}
    assert not names & {"torch", "triton", "nvidia-ml-py", "fla-core"}, names
    assert {"typer", "rich", "polars", "pyarrow", "xxhash", "numpy", "matplotlib", "tokenizers"} <= names
    gpu = " ".join(meta["optional-dependencies"]["gpu"])
    for pkg in ("torch", "triton", "nvidia-ml-py", "fla-core"):
        assert pkg in gpu


def test_replay_and_report_without_torch(tmp_path: Path) -> None:
    """`pic replay` of the bundled sample and `pic report` run with torch and triton unimportable."""
    run, html = tmp_path / "run", tmp_path / "report.html"
    proc, _ = _run_blocked(["-m", "pic", "replay", str(SAMPLE), "--policy", "prefix,irminsul", "--limit", "60",
                            "-o", str(run)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert {"requests.parquet", "summary.json", "config.json"} <= {p.name for p in run.iterdir()}
    proc, _ = _run_blocked(["-m", "pic", "report", str(run), "--html", str(html)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert html.stat().st_size > 10_000
    # the blocker really is in force: importing torch fails under it
    proc, tried = _run_blocked(["-c", "import torch"], tmp_path)
    assert proc.returncode != 0 and "blocked by the test" in proc.stderr and "torch" in tried


def test_python_api_without_torch(tmp_path: Path) -> None:
    """`import pic`, `pic.read_trace`, `pic.replay` work without torch, and never load it."""
    code = textwrap.dedent(f"""
        import sys, pic
        assert "polars" not in sys.modules, "import pic must stay light"
        trace = pic.read_trace({str(SAMPLE)!r})
        res = pic.replay(trace, pic.ReplayConfig(policies=("prefix", "irminsul"), max_requests=40))
        assert res.summary["policies"]["irminsul"]["requests"] == 40
        assert not [m for m in sys.modules if m.partition(".")[0] in ("torch", "triton")]
        print("ok")
    """)
    proc, _ = _run_blocked(["-c", code], tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pic's wheel, built from a copy of the sources (the checkout stays clean)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (src / name).write_bytes((REPO / name).read_bytes())
    subprocess.run(["cp", "-r", str(REPO / "pic"), str(src / "pic")], check=True)
    for cache in (src / "pic").rglob("__pycache__"):
        subprocess.run(["rm", "-rf", str(cache)], check=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {proc.stderr.strip().splitlines()[-1:]}")
    (whl,) = (tmp / "dist").glob("pic-*.whl")
    return whl


def test_wheel_has_one_top_level_package(wheel: Path) -> None:
    """The wheel installs `pic` only: no generic top-level `engine`, `traces` or `kernels` to collide."""
    with zipfile.ZipFile(wheel) as z:
        tops = {n.split("/")[0] for n in z.namelist()}
        top_level = {n for n in tops if not n.endswith(".dist-info")}
        assert top_level == {"pic"}, tops
        assert any(n.startswith("pic/kernels/") for n in z.namelist())


def _hf_kernels_dir() -> Path | None:
    """Where Hugging Face's ``kernels`` is installed (outside this checkout), or None."""
    for entry in sys.path:
        if not entry or Path(entry).resolve() == REPO:
            continue
        cand = Path(entry) / "kernels" / "__init__.py"
        if cand.is_file() and "get_kernel" in cand.read_text(errors="replace"):
            return cand.parent
    return None


def test_hf_kernels_and_pic_side_by_side(wheel: Path, tmp_path: Path) -> None:
    """pic's wheel installed into a venv that also sees Hugging Face `kernels`: both import, in either order.

    The venv's own site-packages (where pic's wheel goes) precedes the system one (where `kernels` is), so a
    top-level `kernels` in pic's wheel would shadow Hugging Face's and fail `from kernels import get_kernel`.
    """
    hf = _hf_kernels_dir()
    if hf is None:
        pytest.skip("Hugging Face `kernels` is not installed (pip install kernels; CI installs it)")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert purelib != sysconfig.get_paths()["purelib"]
    # --system-site-packages reaches the base interpreter only: when this test runs inside a venv (where CI
    # installed `kernels`), the new venv must also see this one's site-packages, after its own
    parents = [p for p in site.getsitepackages() if Path(p).is_dir() and Path(p).resolve() != Path(purelib).resolve()]
    (Path(purelib) / "_parent_site.pth").write_text("".join(p + "\n" for p in parents))
    with zipfile.ZipFile(wheel) as z:
        z.extractall(purelib)     # a pure-Python wheel installs by unpacking into purelib
    check = textwrap.dedent("""
        import sys
        first = sys.argv[1]
        if first == "kernels":
            from kernels import get_kernel
            import pic, pic.engine.replay
        else:
            import pic, pic.engine.replay
            from kernels import get_kernel
        import kernels
        assert callable(get_kernel)
        assert pic.__file__.startswith(sys.argv[2]), pic.__file__
        assert not kernels.__file__.startswith(sys.argv[2]), kernels.__file__
        print(pic.__version__, kernels.__file__)
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for first in ("kernels", "pic"):
        proc = subprocess.run([str(py), "-c", check, first, purelib], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert str(hf) in proc.stdout
