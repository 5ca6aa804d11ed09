# tickwheel worker / CLI image (used by docker-compose.yml).
FROM python:3.11-slim
WORKDIR /app
# Every package pyproject.toml lists, and setup.py (the engine's optional C core: this
# image has no C compiler, so it installs the Python one; a test builds from these copies).
# worker/ and cli/ are what timer/worker and timer/cli link to: installed as timer.worker
# and timer.cli, the one top-level name.
COPY pyproject.toml setup.py README.md ./
COPY timer ./timer
COPY worker ./worker
COPY cli ./cli
# Its services use Redis's own image: the worker's metrics, the HTTP API, the dashboard.
RUN pip install --no-cache-dir '.[metrics,http,dashboard]' \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin tickwheel
# Not root: the worker needs no privilege (its only port, for metrics, is above 1024).
USER tickwheel
# Ready = Redis reachable, clock synced, lease loop ticking in time (a worker's
# --metrics-port 9100 --metrics-host 0.0.0.0); one-shot services turn it off.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["tickwheel", "probe", "--port", "9100"]
ENTRYPOINT ["tickwheel"]
CMD ["--help"]
