# A Ferry worker: Ferry's workflows and activities, with the local agent beside it in the container.
# docker-compose.yml runs two of these against Temporal (PostgreSQL) and Ferry's own PostgreSQL store, and
# the same image as the services proxy (python -m gateway) and Ferry's API (python -m api serve).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    FERRY_HOME=/var/lib/ferry

WORKDIR /opt/ferry
COPY pyproject.toml README.md ./
COPY core core
COPY workflows workflows
COPY activities activities
COPY agent agent
COPY store store
COPY worker worker
COPY embedded embedded
COPY cli cli
COPY gateway gateway
COPY api api
# psycopg: the driver of FERRY_DATABASE_URL=postgresql+psycopg://...
RUN pip install . "psycopg[binary]>=3.1" && mkdir -p "$FERRY_HOME"

# The worker reads FERRY_TEMPORAL_ADDRESS, FERRY_TEMPORAL_NAMESPACE and FERRY_DATABASE_URL.
CMD ["ferry", "worker"]
