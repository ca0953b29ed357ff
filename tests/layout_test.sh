#!/usr/bin/env bash
# trainer/'s libraries include only downward (docs/architecture.md):
#   config -> runtime -> eval -> train -> experiment -> cli
# and trainer/config sees no LibTorch header. Prints every violation; exit 1 if any.
set -euo pipefail
root=${1:?usage: layout_test.sh SOURCE_DIR}
cd "$root"
order=(config runtime eval train experiment cli)
status=0
for i in "${!order[@]}"; do
  lib=${order[$i]}
  for higher in "${order[@]:$((i + 1))}"; do
    if hits=$(grep -rnE "#include \"trainer/$higher/" "trainer/$lib"); then
      echo "trainer/$lib includes trainer/$higher (only downward: ${order[*]}):"
      echo "$hits"
      status=1
    fi
  done
done
for lower in common data models; do
  if hits=$(grep -rnE '#include "trainer/' "$lower"); then
    echo "$lower/ includes trainer/:"; echo "$hits"; status=1
  fi
done
if hits=$(grep -rnE '#include [<"](ATen|torch|c10)/' trainer/config); then
  echo "trainer/config includes LibTorch:"; echo "$hits"; status=1
fi
[[ $status == 0 ]] && echo "layout: trainer/{${order[*]}} include only downward; trainer/config is torch-free"
exit $status
