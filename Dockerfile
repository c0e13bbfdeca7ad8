# syntax=docker/dockerfile:1
# raybus: one image for every service (`raybus watcher|reconciler|status|topology|...`).
#
# Build stage: install the project and its dependencies into a virtualenv; the runtime stage copies
# only that virtualenv, so no compiler, pip cache or source tree ships in the image.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/raybus
WORKDIR /src
# Dependencies first (pyproject only), so code changes do not reinstall them.
COPY pyproject.toml README.md ./
RUN mkdir schema services kubesim migrations \
 && /opt/raybus/bin/pip install . \
 && /opt/raybus/bin/pip uninstall -y raybus
COPY schema ./schema
COPY services ./services
COPY kubesim ./kubesim
COPY migrations ./migrations
RUN /opt/raybus/bin/pip install --no-deps . \
 && /opt/raybus/bin/python -m compileall -q /opt/raybus/lib

FROM python:3.11-slim
LABEL org.opencontainers.image.title="raybus" \
      org.opencontainers.image.description="The KubeRay operator as an event-sourced controller on NATS JetStream" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/raybus /opt/raybus
ENV PATH=/opt/raybus/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The uid the manifests run as (runAsUser 65532); the root filesystem is read-only there, /tmp is an
# emptyDir.
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["raybus"]
CMD ["--help"]
