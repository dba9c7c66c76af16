# One image for every agentfleet service and the CLI:
#   docker run IMAGE executor|toolpool|dispatcher|history    a service
#   docker run IMAGE migrate up                               migrations (the k8s Job)
#   docker run IMAGE cli runs --project demo                  any agentfleet command
#
# Two stages: the build stage installs the package into a venv (and may need pip's build
# tooling); the final stage is slim with no compilers, holding only that venv, the SQL
# migrations and the examples, and runs as a non-root user.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md ./
COPY libs ./libs
COPY services ./services
RUN /opt/venv/bin/pip install --no-compile .

FROM python:3.11-slim AS runtime
RUN groupadd --system --gid 10001 agentfleet \
 && useradd --system --uid 10001 --gid agentfleet --home-dir /app --no-create-home \
      --shell /usr/sbin/nologin agentfleet
COPY --from=build /opt/venv /opt/venv
COPY migrations /app/migrations
COPY examples /app/examples
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    AGENTFLEET_LISTEN_HOST=0.0.0.0 \
    AGENTFLEET_LOG_FORMAT=json \
    AGENTFLEET_DATA_DIR=/tmp/agentfleet \
    AGENTFLEET_MIGRATIONS_DIR=/app/migrations
WORKDIR /app
USER 10001:10001
EXPOSE 50051 50052 50053 50054 50055 50056
ENTRYPOINT ["python", "-m", "agentfleet.cli.entry"]
CMD ["--help"]
