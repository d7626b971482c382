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
    assert capsys.readouterr().out  # every page prints what it shows


def test_getting_started_is_under_40_lines():
    (code,) = _blocks("getting-started.md", "python")
    assert len(code.splitlines()) <= 40


def test_spec_file_examples_validate(tmp_path):
    from twinfer.spec import Spec, load_spec

    blocks = _blocks("spec-files.md", "toml")
    assert len(blocks) == 4
    for k, text in enumerate(blocks):
        path = tmp_path / f"spec{k}.toml"
        path.write_text(text)
        spec, base = load_spec(path)
        assert isinstance(spec, Spec) and base == tmp_path.resolve()
