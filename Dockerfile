# mcpfault for the compose demo: the proxy, the mock server and the benchmark harness.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 mcpfault
WORKDIR /app

COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install . && rm -rf /root/.cache

# The bundled fault profiles ship inside the package: `--profiles mixed`, `--config mixed` work anywhere.
COPY deploy/demo.sh /usr/local/bin/mcpfault-demo
RUN chmod 0755 /usr/local/bin/mcpfault-demo && chown mcpfault:mcpfault /app

USER mcpfault
ENTRYPOINT ["mcpfault"]
CMD ["--help"]
