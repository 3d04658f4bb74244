# Shoebox service image: the API by default; `shoebox worker`, `shoebox projector` and
# `shoebox migrate` from the same image with another command (docker-compose.yml does so).
#   docker build -t shoebox .
#   docker run -e DATABASE_URL=... -e REDIS_URL=... -p 8000:8000 shoebox

# Stage 1: build a wheel of the service, and wheels of its dependencies, with pip's cache.
FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY domain ./domain
COPY events ./events
COPY service ./service
# Neither the embedded PostgreSQL and Redis ([embedded]: compose runs real ones) nor the
# independent verifier (a regulator's tool) belong in the service image.
RUN pip wheel --wheel-dir /wheels .

# Stage 2: the runtime, with the wheels installed and nothing to build them.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    # An installed wheel has no source tree around it: the migrations live here instead.
    SHOEBOX_MIGRATIONS_DIR=/app/migrations \
    # Listen on every interface of the container; publish the port to choose who reaches it.
    SHOEBOX_API_HOST=0.0.0.0 \
    SHOEBOX_API_PORT=8000 \
    SHOEBOX_DATA_DIR=/tmp/shoebox
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels shoebox && rm -rf /wheels
COPY migrations /app/migrations
# Run as an unprivileged user: the image never needs root at run time.
RUN useradd --system --uid 10001 --home-dir /app shoebox
USER 10001
WORKDIR /app
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
# SIGTERM drains: gunicorn finishes the requests in flight and closes feeds with a retry hint.
STOPSIGNAL SIGTERM
ENTRYPOINT ["shoebox"]
CMD ["serve"]
