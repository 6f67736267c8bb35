# gpufleet's container image: the scheduler (`gpufleet scheduler`), the node agent and the CLI.
#   make image                     # docker build -t gpufleet:<version> .
# Small: a slim Python base and a virtual environment of the pinned runtime dependencies only (no compiler,
# no pip, no tests). Non-root: UID/GID 65532, as deploy/ and the chart run it. Reproducible: dependencies
# pinned in docker/requirements.txt, sources and bytecode stamped with SOURCE_DATE_EPOCH; pin the base by
# digest for byte-identical builds: --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:<digest>.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG SOURCE_DATE_EPOCH=0
ENV PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1 \
    SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH}
WORKDIR /src
COPY pyproject.toml README.md ./
COPY docker/ docker/
COPY src/ src/
RUN sh docker/build-venv.sh /opt/gpufleet

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gpufleet" \
      org.opencontainers.image.description="GPU-aware Kubernetes scheduler, node agent and simulator" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/gpufleet/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=build /opt/gpufleet /opt/gpufleet
USER 65532:65532
ENTRYPOINT ["gpufleet"]
CMD ["--help"]
