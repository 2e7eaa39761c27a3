# One image per repository snapshot (built by `forgeline image`, src/forgeline/sandbox/images.py).
# The build context is assembled by forgeline, deterministically: this file as `Dockerfile` and
# the snapshot's files under `repo/` (sorted, fixed mtimes and owners), and under `wheels/` the
# wheels of the snapshot's pinned test dependencies (forgeline-requirements.txt), fetched on the
# host beforehand, with `wheels/requirements.txt` naming each by version and sha256 (only a
# comment when the snapshot has none).
#
# Needs from the base image: python3 with pytest, git, bash and coreutils; pip when there are
# wheels. No network at build time: nothing is downloaded or resolved (`--no-index --no-deps
# --require-hashes`), so a build works on a machine that reaches no registry.
#
# Layout (SWE-bench's convention): the repository at /testbed, a git repo with one baseline
# commit of the pristine snapshot, so `git diff` shows what changed. A second copy that only root
# can read, /opt/forgeline/testbed, is what the sandbox copies into each session's private
# /testbed (a size-limited tmpfs); an agent running as `forgeline` cannot read it.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

# PYTHONPATH: a src/ layout's packages import as if installed, ahead of Debian's own copies
# (/usr/lib/python3/dist-packages has e.g. packaging, more_itertools); a no-op without src/.
ENV PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 \
    PYTHONPATH=/testbed/src \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONHASHSEED=0 \
    PYTHONUNBUFFERED=1 \
    TZ=UTC \
    LC_ALL=C.UTF-8 \
    HOME=/home/forgeline

COPY repo/ /testbed/
COPY wheels/ /tmp/forgeline-wheels/
# `python3 -m pytest` through a zygote with pytest imported (src/forgeline/sandbox/container/):
# a site-packages hook hands exactly that start to it; every other start is untouched.
COPY forgeline/ /usr/local/lib/forgeline/

# One RUN step: every step of the legacy builder costs a container start.
# Test dependencies go to /usr/local (Debian's site for pip), not into /testbed.
# Fixed identity and dates: the baseline commit's id depends on the snapshot's content only
# (`add -f`: a .gitignore in the snapshot cannot leave a file out of it).
RUN set -eu; \
    if grep -q '^[^#]' /tmp/forgeline-wheels/requirements.txt; then \
      python3 -m pip --version >/dev/null 2>&1 || { echo 'base image lacks pip (python3-pip), needed for wheels' >&2; exit 1; }; \
      python3 -m pip install --no-index --no-deps --require-hashes --find-links /tmp/forgeline-wheels \
        --no-compile --no-cache-dir --disable-pip-version-check --root-user-action=ignore \
        --break-system-packages -r /tmp/forgeline-wheels/requirements.txt; \
    fi; \
    rm -rf /tmp/forgeline-wheels; \
    echo 'forgeline:x:1000:1000:forgeline sandbox user:/home/forgeline:/bin/bash' >> /etc/passwd; \
    echo 'forgeline:x:1000:' >> /etc/group; \
    mkdir -p /home/forgeline; chown 1000:1000 /home/forgeline; \
    cd /testbed; \
    export GIT_AUTHOR_NAME=forgeline GIT_AUTHOR_EMAIL=forgeline@localhost \
           GIT_COMMITTER_NAME=forgeline GIT_COMMITTER_EMAIL=forgeline@localhost \
           GIT_AUTHOR_DATE=2000-01-01T00:00:00Z GIT_COMMITTER_DATE=2000-01-01T00:00:00Z; \
    git init -q; \
    git -c commit.gpgsign=false add -A -f; \
    git -c commit.gpgsign=false commit -q -m baseline --allow-empty; \
    chown -R 1000:1000 /testbed; \
    mkdir -m 0700 /opt/forgeline; \
    cp -a /testbed /opt/forgeline/testbed; \
    cd / && python3 -c 'import pytest' || { echo 'base image lacks pytest' >&2; exit 1; }; \
    site="$(python3 -c 'import site; print(site.getsitepackages()[0])')"; mkdir -p "$site"; \
    mv /usr/local/lib/forgeline/forgeline_pytest_zygote.pth "$site/"

USER forgeline
WORKDIR /testbed
CMD ["python3", "-m", "pytest", "-p", "no:cacheprovider", "tests"]
