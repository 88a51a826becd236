"""Identity of the custom resource: API group, version, kind and names."""

GROUP = "tide.dev"
VERSION = "v1alpha1"
KIND = "TideDeployment"
PLURAL = "tidedeployments"
SINGULAR = "tidedeployment"
SHORT_NAMES = ("td",)
CRD_NAME = f"{PLURAL}.{GROUP}"
API_VERSION = f"{GROUP}/{VERSION}"
