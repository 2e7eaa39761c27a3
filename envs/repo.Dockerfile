# One image per repository snapshot (built by `forgeline image`, src/forgeline/sandbox/images.py).
# The build context is assembled by forgeline, deterministically: this file as `Dockerfile` and
# the snapshot's files under `repo/` (sorted, fixed mtimes and owners).
#
# Needs from the base image: python3 with pytest, git, bash and coreutils. No network at build
# time: nothing is downloaded, so a build works on a machine that reaches no registry.
#
# Layout (SWE-bench's convention): the repository at /testbed, a git repo with one baseline
# commit of the pristine snapshot, so `git diff` shows what changed. A second copy that only root
# can read, /opt/forgeline/testbed, is what the sandbox copies into each session's private
# /testbed (a size-limited tmpfs); an agent running as `forgeline` cannot read it.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}

ENV PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONHASHSEED=0 \
    PYTHONUNBUFFERED=1 \
    TZ=UTC \
    LC_ALL=C.UTF-8 \
    HOME=/home/forgeline

COPY repo/ /testbed/

# One RUN step: every step of the legacy builder costs a container start.
# Fixed identity and dates: the baseline commit's id depends on the snapshot's content only.
RUN set -eu; \
    echo 'forgeline:x:1000:1000:forgeline sandbox user:/home/forgeline:/bin/bash' >> /etc/passwd; \
    echo 'forgeline:x:1000:' >> /etc/group; \
    mkdir -p /home/forgeline; chown 1000:1000 /home/forgeline; \
    cd /testbed; \
    export GIT_AUTHOR_NAME=forgeline GIT_AUTHOR_EMAIL=forgeline@localhost \
           GIT_COMMITTER_NAME=forgeline GIT_COMMITTER_EMAIL=forgeline@localhost \
           GIT_AUTHOR_DATE=2000-01-01T00:00:00Z GIT_COMMITTER_DATE=2000-01-01T00:00:00Z; \
    git init -q; \
    git -c commit.gpgsign=false add -A; \
    git -c commit.gpgsign=false commit -q -m baseline --allow-empty; \
    chown -R 1000:1000 /testbed; \
    mkdir -m 0700 /opt/forgeline; \
    cp -a /testbed /opt/forgeline/testbed; \
    python3 -m pytest --version >/dev/null 2>&1 || { echo 'base image lacks pytest' >&2; exit 1; }

USER forgeline
WORKDIR /testbed
CMD ["python3", "-m", "pytest", "-p", "no:cacheprovider", "tests"]
