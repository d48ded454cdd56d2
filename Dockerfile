# gpuwarden's image: every command (collect, exporter, serve, k8s extender, report, scheduler).
#   docker build -t ghcr.io/gpuwarden/gpuwarden:0.1.0 .
# Two stages: wheels are built with the compilers of the full image, the runtime stage installs
# them into a slim one and runs as an unprivileged user. The base is pinned to a release
# (Python 3.11.11 on Debian 12); pin its digest too where your registry policy asks for it:
# docker buildx imagetools inspect python:3.11.11-slim-bookworm.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpuwarden ./gpuwarden
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[k8s,influx]'

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.source="https://github.com/gpuwarden/gpuwarden" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 gpuwarden \
 && useradd --system --uid 10001 --gid gpuwarden --home-dir /var/lib/gpuwarden --create-home gpuwarden
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels 'gpuwarden[k8s,influx]' \
 && rm -rf /wheels
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /var/lib/gpuwarden
EXPOSE 8080 9400 8888
ENTRYPOINT ["gpuwarden"]
CMD ["--help"]
