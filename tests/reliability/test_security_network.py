"""#52, code from data files: a grid network JSON imports nothing it names that a network does not hold."""

from __future__ import annotations

import json
import sys
import warnings

import pytest

from twinfer.data import load_grid

_PROBE = """
from pathlib import Path
Path({marker!r}).write_text("imported")
class Probe:
    pass
"""


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A module ``planted_twinfer_probe`` on ``sys.path`` that writes a marker file when imported."""
    marker = tmp_path / "imported.txt"
    (tmp_path / "planted_twinfer_probe.py").write_text(_PROBE.format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "planted_twinfer_probe", raising=False)
    return marker


def _network_document() -> dict:
    import pandapower
    import pandapower.networks as pn

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return json.loads(pandapower.to_json(pn.case9()))


def test_network_json_naming_a_module_imports_nothing(tmp_path, planted):
    """pandapower imported any module a network JSON names before refusing its class (``"_module":
    "this"`` printed the Zen of Python). The file's objects are checked against what a network holds
    first: a network pandapower wrote loads as the bundled case; one naming a planted module, at the top
    of a table or inside a table's cells, is refused, naming the file, the JSON location and the module,
    and the module is never imported."""
    document = _network_document()
    good = tmp_path / "net9.json"
    good.write_text(json.dumps(document))
    assert (load_grid(str(good)).coupling != load_grid("ieee9").coupling).nnz == 0
    probe = {"_module": "planted_twinfer_probe", "_class": "Probe", "_object": "{}"}
    document["_object"]["probe"] = probe
    top = tmp_path / "top.json"
    top.write_text(json.dumps(document))
    with pytest.raises(
        ValueError,
        match=r"grid network .*top\.json.*received _module 'planted_twinfer_probe', "
        r"_class 'Probe' at \$\._object\.probe\. Nothing was imported",
    ):
        load_grid(str(top))
    del document["_object"]["probe"]
    table = json.loads(document["_object"]["bus"]["_object"])
    table["data"][0][0] = probe  # a cell of the bus table's name column
    document["_object"]["bus"]["_object"] = json.dumps(table)
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps(document))
    with pytest.raises(
        ValueError,
        match=r"_module 'planted_twinfer_probe', _class 'Probe' at "
        r"\$\._object\.bus\._object\.data\[0\]\[0\]",
    ):
        load_grid(str(nested))
    assert not planted.exists()
    assert "planted_twinfer_probe" not in sys.modules


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ('{"_module": "pandapower.auxiliary", "_class": "pandapowerNet", "_object": {"bus": ',
         r"expected a pandapower network in JSON; the file is not JSON"),
        ('{"name": "not a network", "rows": [1, 2, 3]}',
         r"expected a pandapower network as pandapower\.to_json writes it .*received \['name', 'rows'\]"),
        ("[1, 2, 3]", r"expected a pandapower network as pandapower\.to_json writes it .*received list"),
    ],
)  # fmt: skip
def test_corrupt_or_foreign_network_json_is_a_named_error(tmp_path, text, pattern):
    """A truncated JSON, or JSON that is not a network (``AttributeError: 'dict' object has no attribute
    'version'`` before), is a named error naming the file."""
    path = tmp_path / "net.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"grid network .*net\.json'?: {pattern}"):
        load_grid(str(path))
