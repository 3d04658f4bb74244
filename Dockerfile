# Shoebox service image. Build: docker build -t shoebox .
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY domain ./domain
COPY events ./events
COPY service ./service
COPY migrations ./migrations
RUN pip install --no-cache-dir .
# Run as an unprivileged user: the image never needs root at run time.
RUN useradd --system --uid 10001 shoebox
USER shoebox
ENTRYPOINT ["shoebox"]
CMD ["simulate", "--shoes", "10"]
