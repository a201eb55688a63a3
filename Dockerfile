# ToolHub's production image: the web server (uvicorn, as a non-root user), and with another
# command the Celery worker, the maintenance worker and beat. docs/deploying.md, "A container
# image", says how to run it and which privileges the worker needs for bubblewrap.
#
#   docker build -t toolhub .
#   docker build --build-arg BASE=toolhub-base:bookworm -t toolhub .   # a base image of your own
#
# The base must be Debian 12 (bookworm): its python3.11 is the interpreter of toolkit
# environments (/usr/bin/python3.11, readable by the sandbox users) and its bubblewrap is 0.8.
ARG BASE=debian:bookworm-slim
FROM ${BASE}

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/toolhub/venv/bin:$PATH \
    TOOLHUB_DATA_DIR=/var/lib/toolhub \
    TOOLHUB_SANDBOX_UIDS=16

# bubblewrap and libseccomp: the sandbox; python3.11 and its venv: ToolHub and the toolkits'
# environments; ca-certificates: the package index and model connections over HTTPS.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv bubblewrap libseccomp2 ca-certificates \
 && rm -rf /var/lib/apt/lists/*

# The users: `toolhub` runs the web server, beat and the maintenance worker; the sandboxes run
# as `toolhub-sandbox` and the pool `toolhub-sb-NNNN` (one per concurrent sandbox), builds as
# `toolhub-build` (as scripts/system-setup makes them on a host). The pool's size must be at
# least TOOLHUB_SANDBOX_UIDS of the worker; rebuild with another value to change it.
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/toolhub --shell /usr/sbin/nologin toolhub \
 && useradd --system --no-create-home --shell /usr/sbin/nologin toolhub-sandbox \
 && useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin toolhub-build \
 && for i in $(seq 0 $((TOOLHUB_SANDBOX_UIDS - 1))); do \
      useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
        "$(printf 'toolhub-sb-%04d' "$i")"; \
    done \
 && install -d -m 0711 -o toolhub -g toolhub /var/lib/toolhub

WORKDIR /opt/toolhub
# Offline (no index reachable): put the wheels of requirements.txt in .image-wheels/ and build
# with --build-arg PIP_ARGS="--no-index --find-links /tmp/wheels" (`make image` does). The
# hashes are checked either way.
ARG PIP_ARGS=""
COPY requirements.txt .image-wheel[s] /tmp/wheels/
RUN python3.11 -m venv /opt/toolhub/venv \
 && pip install --no-cache-dir --require-hashes $PIP_ARGS -r /tmp/wheels/requirements.txt \
 && rm -rf /tmp/wheels
COPY . .
# Byte-compiled once here; readable by every user whatever the checkout's umask was (the
# sandbox users never see it: they get the runtime's copy in the data directory).
RUN python -m compileall -q toolhub \
 && find /opt/toolhub -path /opt/toolhub/venv -prune -o -exec chmod a+rX {} +

VOLUME /var/lib/toolhub
EXPOSE 8000
USER toolhub
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
CMD ["uvicorn", "toolhub.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--proxy-headers", "--no-access-log"]
