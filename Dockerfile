# tickwheel worker / CLI image (used by docker-compose.yml).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY timer ./timer
COPY worker ./worker
COPY cli ./cli
RUN pip install --no-cache-dir .
ENTRYPOINT ["tickwheel"]
CMD ["--help"]
