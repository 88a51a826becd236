"""The whole product on a local plane: install the operator (CRD, RBAC, process) and the demo."""
