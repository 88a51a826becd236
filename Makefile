.PHONY: demo demo-fast test setup lint cluster-up cluster-down clean kind-e2e chart-readme

demo:            ## the whole loop, real vLLM on CPU + real trainer (~15 min; see README)
	bash hack/demo.sh

demo-fast:       ## the operator story with simulated vLLM pods (~1 min once cached)
	bash hack/demo.sh --fast

test:            ## lint + every test tier; installs what it needs
	bash hack/test.sh

setup:
	bash hack/setup.sh

lint:
	.venv/bin/ruff check .

chart-readme:    ## regenerate charts/tide-operator/README.md from values.yaml (helm-docs comments)
	.venv/bin/python hack/chart-readme.py

cluster-up:      ## a local control plane with fake GPU nodes; prints KUBECONFIG
	.venv/bin/python -m tide_localcluster up

cluster-down:
	.venv/bin/python -m tide_localcluster down

kind-e2e:        ## the chart on kind with CPU vLLM (needs Docker, kind, helm, kubectl; docs/kind-e2e.md)
	bash e2e/kind/run.sh
