# syntax=docker/dockerfile:1
# raybus: one image for every service (`raybus watch|applier|prober|reconciler|status|topology|...`).
#
# Build stage: install the project and its dependencies into a virtualenv; the runtime stage copies
# only that virtualenv, so no compiler, pip cache, installer or source tree ships in the image.
# The base is pinned by digest (refresh: `docker buildx imagetools inspect python:3.11-slim`), the
# dependencies by requirements.lock (regenerate: scripts/lock), so a rebuild installs the same bits.
ARG PYTHON_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/raybus
WORKDIR /src
# Dependencies first (the lock only), so code changes do not reinstall them.
COPY requirements.lock ./
RUN /opt/raybus/bin/pip install --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY schema ./schema
COPY services ./services
COPY kubeaccess ./kubeaccess
COPY kubesim ./kubesim
COPY realkube ./realkube
COPY migrations ./migrations
RUN /opt/raybus/bin/pip install --no-deps . \
 && /opt/raybus/bin/pip check \
 && /opt/raybus/bin/python -m pip uninstall -y setuptools pip \
 && /opt/raybus/bin/python -m compileall -q /opt/raybus/lib

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="raybus" \
      org.opencontainers.image.description="The KubeRay operator as an event-sourced controller on NATS JetStream" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/raybus /opt/raybus
# The base image's own installer and build tools are not needed to run raybus.
RUN python -m pip uninstall -y setuptools wheel pip
ENV PATH=/opt/raybus/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The uid the manifests run as (runAsUser 65532); the root filesystem is read-only there, /tmp is an
# emptyDir.
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["raybus"]
CMD ["--help"]
