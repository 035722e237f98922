# The gateway as a container:
#   docker build -t archive-gateway .
#   docker run -p 8080:8080 -v "$PWD/archive:/app/archive" archive-gateway
# It serves /app/collections.yaml, the repository's (mount another file over it
# to change the collections). Relative paths in it resolve under /app, so the
# default collection reads and writes /app/archive, declared a volume.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

COPY . .
RUN pip install . \
    && rm -rf build *.egg-info \
    && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin gateway \
    && mkdir -p /app/archive \
    && chown gateway:gateway /app/archive

USER gateway
VOLUME ["/app/archive"]
EXPOSE 8080

CMD ["gateway", "serve", "--host", "0.0.0.0", "--port", "8080", "--config", "/app/collections.yaml"]
