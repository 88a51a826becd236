# Operator image: the Kopf operator and the `tide` CLI, non-root, on a slim Python base.
#
#   docker build -f images/operator.Dockerfile -t ghcr.io/tide-operator/tide-operator:0.1.0 .
#   hack/build-images.sh operator          # the same, tagged from pyproject's version
#
# The chart runs it read-only with /tmp as an emptyDir; the operator writes nothing else.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
# One distribution with a package root per part; only the operator extra's dependencies go in, so
# the trainer's and serving plugin's code ships inert (no torch, no vLLM).
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY contracts ./contracts
COPY trainer ./trainer
COPY serving ./serving
COPY e2e ./e2e
RUN python -m venv /opt/tide \
 && /opt/tide/bin/pip install --no-cache-dir ".[operator]" \
 && /opt/tide/bin/python -c "import kopf, tide_operator.handlers, tide_operator.metrics"

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/tide /opt/tide
# 65532 is the conventional "nonroot" user of distroless images; the chart's securityContext uses it.
RUN groupadd --gid 65532 nonroot && useradd --uid 65532 --gid 65532 --no-create-home --shell /sbin/nologin nonroot
USER 65532:65532
ENV PATH=/opt/tide/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
EXPOSE 8080 9100
ENTRYPOINT ["python", "-m", "tide_operator"]
CMD ["--liveness=http://0.0.0.0:8080/healthz"]
