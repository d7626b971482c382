"""Build a test FMU from its C source in ``tests/fmu_src/<name>`` (issue #56: no binary without source).

:func:`build_fmu` compiles ``model.c`` with the machine's C compiler against the FMI 2.0 headers fmpy
ships (``fmpy/c-code``) into ``binaries/<platform>/<modelIdentifier>.so`` and zips it with
``modelDescription.xml`` and ``sources/`` as an ``.fmu`` (FMI 2.0.4, section 2.3: the archive's layout).
A model whose description says ``fmiVersion="3.0"`` is compiled against the FMI 3.0 headers and its
binary placed under the platform tuple, ``binaries/<arch>-<os>/`` (FMI 3.0.1, section 2.5.1).
Nothing built is committed; the tests build into a temporary folder once per session.
"""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import fmpy

SOURCES = Path(__file__).parent / "fmu_src"


def compiler() -> str | None:
    """The C compiler on the path (``cc``, else ``gcc``), or None."""
    return shutil.which("cc") or shutil.which("gcc")


def build_fmu(name: str, folder: Path) -> Path:
    """Compile ``tests/fmu_src/<name>/model.c`` and zip ``<folder>/<name>.fmu``; the path of the FMU.

    Raises:
        RuntimeError: no C compiler on the path, or the compiler failed (its message).

    """
    cc = compiler()
    if cc is None:
        raise RuntimeError("build_fmu: expected a C compiler (cc or gcc) on the path; found none.")
    source = SOURCES / name
    headers = Path(fmpy.__file__).parent / "c-code"
    library = folder / f"{name}{fmpy.sharedLibraryExtension}"
    done = subprocess.run(
        [
            cc,
            "-shared",
            "-fPIC",
            "-O2",
            "-std=c99",
            "-Wall",
            f"-I{headers}",
            str(source / "model.c"),
            "-o",
            str(library),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"build_fmu {name}: the C compiler failed:\n{done.stderr}")
    fmi3 = 'fmiVersion="3.0"' in (source / "modelDescription.xml").read_text()
    platform = fmpy.platform_tuple if fmi3 else fmpy.platform
    fmu = folder / f"{name}.fmu"
    with zipfile.ZipFile(fmu, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(source / "modelDescription.xml", "modelDescription.xml")
        zf.write(library, f"binaries/{platform}/{name}{fmpy.sharedLibraryExtension}")
        zf.write(source / "model.c", "sources/model.c")
    return fmu


def edited_copy(source: Path, target: Path, *, drop: str | None = None, edit=None) -> Path:
    """``source`` copied to ``target`` without its members under ``drop``, its modelDescription.xml edited
    by ``edit(xml) -> xml``: an FMU broken on purpose, for the tests of the named errors."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for item in src.infolist():
            if drop is not None and item.filename.startswith(drop):
                continue
            data = src.read(item.filename)
            if item.filename == "modelDescription.xml" and edit is not None:
                data = edit(data.decode()).encode()
            dst.writestr(item, data)
    return target
