#!/usr/bin/env bash
# octet's chat-template interpreter (jinja/) against Python's jinja2 from
# PyPI (jinja2_oracle.py beside this says what is compared). Makes, or
# reuses while it has the pinned versions, a virtualenv with jinja2, then
# runs the script in a fresh work directory.
#
#   tests/jinja/jinja2_oracle.sh JINJA_RENDER_BIN WORK_VENV_DIR
#
# e.g. tests/jinja/jinja2_oracle.sh build/bin/jinja_render .venvs/jinja2
# Further arguments go to the script. Skips (exit 77) only when pip cannot
# reach PyPI; any other failure fails.
set -euo pipefail
render="$1"; venv="$2"; shift 2
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

. "$here/../pypi_venv.sh"

pypi_venv jinja2_oracle "$venv" "$work/pip.log" "jinja2==3.1.6" "markupsafe==3.0.4"
"$venv/bin/python" "$here/jinja2_oracle.py" --render "$render" \
  --data "$here/../data/chat_templates" --work "$work" "$@"
