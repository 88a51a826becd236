"""Pure builders of the Kubernetes objects the operator owns."""
