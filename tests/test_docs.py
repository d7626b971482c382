"""The documentation's examples are code that runs: every ``python`` block of a page and every spec file.

Each page's ``python`` blocks run in order in one namespace, as a reader pasting them would; their
``assert`` lines are the page's claims (k4 inside its interval, the log-likelihood's choice of
process noise). Each ``toml`` block of the spec-file page validates as a spec.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(p.name for p in DOCS.glob("*.md") if "```python" in p.read_text())


def _blocks(page: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", (DOCS / page).read_text(), re.S | re.M)


def test_the_pages_with_code_are_found():
    assert {"getting-started.md", "tuning.md"} <= set(PAGES)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", PAGES)
def test_page_code_runs(page, capsys, monkeypatch):
    name = f"docs_{page.removesuffix('.md').replace('-', '_')}"
    module = types.ModuleType(name)  # a real module, as a reader's script is (dataclasses look it up)
    monkeypatch.setitem(sys.modules, name, module)
    for k, code in enumerate(_blocks(page, "python")):
        exec(compile(code, f"{DOCS / page}[python block {k + 1}]", "exec"), module.__dict__)
    out = capsys.readouterr().out
    assert out  # every page prints what it shows
    shown = "".join(_blocks(page, "text"))
    if shown:  # and what it prints is what the page says it prints
        _same_printout(out, shown)


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _same_printout(out: str, shown: str, rtol: float = 0.02) -> None:
    """The words equal and every number within ``rtol`` (other CPUs round the last digits differently)."""
    words = [_NUMBER.sub("#", text).split() for text in (out, shown)]
    assert words[0] == words[1], f"printed:\n{out}\nthe page shows:\n{shown}"
    for got, want in zip(_NUMBER.findall(out), _NUMBER.findall(shown), strict=True):
        assert abs(float(got) - float(want)) <= rtol * abs(float(want)) + 1e-12, (
            f"printed {got} where the page shows {want}:\n{out}"
        )


def test_getting_started_is_under_40_lines():
    (code,) = _blocks("getting-started.md", "python")
    assert len(code.splitlines()) <= 40


def test_spec_file_examples_validate(tmp_path):
    """Every spec block validates; the FMU's reads the Reference FMU beside the spec (when present)."""
    import shutil

    from twinfer.data._benchmarks import default_data_root
    from twinfer.spec import Spec, load_spec

    blocks = _blocks("spec-files.md", "toml")
    assert len(blocks) == 6
    fmu = default_data_root().parent / "fmus" / "VanDerPol.fmu"
    if fmu.is_file():
        shutil.copy(fmu, tmp_path / fmu.name)
    else:
        blocks = [b for b in blocks if 'kind = "fmu"' not in b]
    for k, text in enumerate(blocks):
        path = tmp_path / f"spec{k}.toml"
        path.write_text(text)
        spec, base = load_spec(path)
        assert isinstance(spec, Spec) and base == tmp_path.resolve()
