#!/usr/bin/env bash
# trainer/'s libraries include only downward (docs/architecture.md):
#   config -> runtime -> eval -> train -> experiment -> cli
# and trainer/config sees no LibTorch header; nor do the model families (models/families/,
# which the config reads) or what they include. data/ never includes models/. Prints every
# violation; exit 1 if any.
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
if hits=$(grep -rnE '#include ([<](ATen|torch|c10)/|"models/(transformer|positions|attention|hf|model_io|safetensors)\.h")' models/families models/hf_names.*); then
  echo "models/families includes LibTorch or the torch side of models/:"; echo "$hits"; status=1
fi
if hits=$(grep -rnE '#include "models/' data); then
  echo "data/ includes models/:"; echo "$hits"; status=1
fi
[[ $status == 0 ]] && echo "layout: trainer/{${order[*]}} include only downward; trainer/config and models/families are torch-free; data/ does not include models/"
exit $status
