"""Typed TideDeployment spec and status; the CRD schema is generated from these models."""

from tide_operator.api.resource import API_VERSION, GROUP, KIND, PLURAL, SHORT_NAMES, VERSION
from tide_operator.api.spec import TideDeploymentSpec
from tide_operator.api.status import Phase, TideDeploymentStatus
from tide_operator.api.validation import SpecError, parse_spec

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAMES",
    "VERSION",
    "Phase",
    "SpecError",
    "TideDeploymentSpec",
    "TideDeploymentStatus",
    "parse_spec",
]
