"""Run folders, reports against the papers' values, and atomic artefact writing."""

from twinfer.report._files import to_toml, write_figure, write_json, write_npz, write_text
from twinfer.report._report import (
    PaperValue,
    Tolerance,
    at_least,
    at_most,
    near,
    render_report,
    verdict,
    within,
)
from twinfer.report._run import RunArtifacts, check_output_folder, new_run_dir, read_run, write_run

__all__ = [
    "PaperValue",
    "RunArtifacts",
    "Tolerance",
    "at_least",
    "at_most",
    "near",
    "verdict",
    "within",
    "check_output_folder",
    "new_run_dir",
    "read_run",
    "render_report",
    "to_toml",
    "write_figure",
    "write_json",
    "write_npz",
    "write_run",
    "write_text",
]
from twinfer.report._posterior import (  # noqa: E402
    has_posterior,
    posterior_figures,
    summary_table,
    to_inference_data,
    write_posterior,
)

__all__ += ["has_posterior", "posterior_figures", "summary_table", "to_inference_data", "write_posterior"]
from twinfer.report._matrices import matrix_figure, weight_summary  # noqa: E402

__all__ += ["matrix_figure", "weight_summary"]
