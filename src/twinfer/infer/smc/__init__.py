"""Sequential Monte Carlo over static parameters: IBIS (independent MH moves) and adaptive tempering."""

from twinfer.infer.smc._ibis import IBISResult, IBISState, IncrementalLikelihood, ess, ibis
from twinfer.infer.smc._prior import TransformedNormalPrior

__all__ = ["IBISResult", "IBISState", "IncrementalLikelihood", "TransformedNormalPrior", "ess", "ibis"]
from twinfer.infer.smc._ibis import history_loglik  # noqa: E402

__all__ += ["history_loglik"]
from twinfer.infer.smc._tempering import conditional_ess, next_lambda, tempering  # noqa: E402

__all__ += ["conditional_ess", "next_lambda", "tempering"]
from twinfer.infer.smc._output_error import OutputErrorLikelihood  # noqa: E402

__all__ += ["OutputErrorLikelihood"]
from twinfer.infer.smc._moments import (  # noqa: E402
    equal_weight_draw,
    normalised_weights,
    weighted_moments,
    weighted_quantiles,
)

__all__ += ["equal_weight_draw", "normalised_weights", "weighted_moments", "weighted_quantiles"]
from twinfer.infer.smc._summary import posterior_arrays, posterior_metrics, truth_coverage  # noqa: E402

__all__ += ["posterior_arrays", "posterior_metrics", "truth_coverage"]
