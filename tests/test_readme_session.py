"""The README's "Typical session", run as written (80 requests instead of 1000), produces every artifact it
promises; its HTML report, opened in headless Chromium, shows the headline and the capacity plot with no
console message (skipped where no Chromium is installed: `apt-get install chromium`)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pic.cli.app import app

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SMALL = 80


def session_commands() -> list[list[str]]:
    """The Typical session block: continuation lines joined, comments dropped, one argv per command."""
    text = README.read_text()
    block = re.search(r"## Typical session\s+```bash\n(.*?)```", text, flags=re.S)
    assert block, "README has no Typical session block"
    lines = block.group(1).replace("\\\n", " ").splitlines()
    cmds = [shlex.split(line, comments=True) for line in lines if line.strip()]
    assert all(c and c[0] == "pic" for c in cmds), cmds
    return cmds


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    """Run every command of the block in a fresh folder (in process); the only change: --requests 80."""
    work = tmp_path_factory.mktemp("session")
    runner = CliRunner()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        for argv in session_commands():
            args = argv[1:]
            if "--requests" in args:
                i = args.index("--requests") + 1
                args[i] = str(min(int(args[i]), SMALL))
            res = runner.invoke(app, args, env={"COLUMNS": "160"})
            assert res.exit_code == 0, f"{shlex.join(argv)} failed:\n{res.output}"
    return work


def test_every_promised_artifact_is_there(session: Path) -> None:
    """Trace, both run dirs, report.html, the capacity plot and one TTFT CDF per capacity (named)."""
    assert (session / "rag.parquet").is_file()
    for run in ("runs/rag-8g", "runs/rag-2g"):
        for f in ("requests.parquet", "summary.json", "config.json"):
            assert (session / run / f).is_file(), f"{run}/{f}"
        conf = json.loads((session / run / "config.json").read_text())
        assert conf["replicas"] == 2 and conf["command"].startswith("pic replay rag.parquet")
    plots = {p.name for p in (session / "plots").iterdir()}
    assert {"hit_rate_vs_capacity.png", "ttft_cdf_cap-2GiB.png", "ttft_cdf_cap-8GiB.png"} <= plots, plots
    html = (session / "report.html").read_text()
    assert html.count("for the best prefix cache (prefix)") == 2          # one headline per capacity
    assert html.index("id='fig-hit_rate_vs_capacity'") < html.index("id='comparison'")
    text = README.read_text()
    for name in ("hit_rate_vs_capacity.png", "ttft_cdf_cap-8GiB.png"):
        assert name in text and name in plots


_PROBE = """
<script>
window.addEventListener('load', () => {
  const box = el => el ? el.getBoundingClientRect() : null;
  const shown = el => { const b = box(el); const s = el && getComputedStyle(el);
    return !!b && b.width > 0 && b.height > 0 && s.display !== 'none' && s.visibility !== 'hidden'; };
  const head = document.querySelector('#headline');
  const cap = document.querySelector('#fig-hit_rate_vs_capacity img');
  const r = {headline: shown(head) && head.innerText.includes('for the best prefix cache'),
             headline_top: box(head).top, capacity: shown(cap) && cap.complete && cap.naturalWidth > 0,
             capacity_top: box(cap).top, comparison_top: box(document.querySelector('#comparison')).top,
             images: [...document.images].every(i => i.complete && i.naturalWidth > 0),
             num_images: document.images.length};
  document.body.setAttribute('data-probe', JSON.stringify(r));
});
</script>
"""


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


@pytest.mark.skipif(_chromium() is None, reason="no Chromium here (apt-get install chromium)")
def test_report_in_a_real_browser(session: Path, tmp_path: Path) -> None:
    """Headless Chromium loads report.html: no console message at all, the headline in the first screen,
    the capacity plot decoded and shown before the tables, every embedded PNG decoded."""
    page = tmp_path / "report.html"
    page.write_text((session / "report.html").read_text().replace("</body>", _PROBE + "</body>"))
    cmd = [_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000", "--dump-dom", page.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    m = re.search(r"data-probe=\"([^\"]*)\"", proc.stdout)
    assert m, proc.stdout[-500:]
    probe = json.loads(m.group(1).replace("&quot;", '"'))
    assert probe["headline"] and probe["headline_top"] < 300, probe
    assert probe["capacity"] and probe["capacity_top"] < probe["comparison_top"], probe
    assert probe["images"] and probe["num_images"] >= 7, probe
