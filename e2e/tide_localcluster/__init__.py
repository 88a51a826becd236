"""A real Kubernetes control plane on loopback, fake GPU nodes, and a kubelet that runs processes."""
