# The kind e2e's serving image: the CPU serving image (images/serving-cpu.Dockerfile) with a tiny
# target and draft baked in at /models, so vLLM pods start without downloading a model.
#
#   docker build -f e2e/kind/serving-tiny.Dockerfile --build-arg BASE_IMAGE=<serving-cpu image> e2e/kind
ARG BASE_IMAGE=ghcr.io/tide-operator/vllm-tide-cpu:0.1.0
FROM ${BASE_IMAGE}
# The base runs as 65532; baking /models needs root, the pods run as the base's user again.
USER root
COPY bake_tiny_models.py /tmp/bake_tiny_models.py
RUN python /tmp/bake_tiny_models.py /models \
 && rm /tmp/bake_tiny_models.py \
 && chmod -R a+rX /models \
 && chown -R 65532:65532 /home/nonroot
USER 65532:65532
