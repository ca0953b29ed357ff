#!/usr/bin/env bash
# trainer/'s libraries include only downward (docs/architecture.md):
#   config -> runtime -> eval -> train -> experiment -> cli
# and trainer/config sees no LibTorch header; nor does the model spec it reads (models/spec/: the
# model config, its rules and the families), which includes nothing of models/modules/ either.
# data/ never includes models/. Outside models/spec/families/ and the archs' own table
# (models/spec/arch.h), product code never names an architecture (Arch::...): it reads the arch's
# layout or asks its family; and no code compares an evaluation task's name (it asks the task);
# and no product file is over 500 lines but the named exceptions.
# Prints every violation; exit 1 if any.
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
for lower in common data kernels models; do
  if hits=$(grep -rnE '#include "trainer/' "$lower"); then
    echo "$lower/ includes trainer/:"; echo "$hits"; status=1
  fi
done
if hits=$(grep -rnE '#include [<"](ATen|torch|c10)/' trainer/config); then
  echo "trainer/config includes LibTorch:"; echo "$hits"; status=1
fi
if hits=$(grep -rnE '#include ([<"](ATen|torch|c10)/|"models/modules/)' models/spec); then
  echo "models/spec includes LibTorch or models/modules/ (the spec is torch-free):"; echo "$hits"; status=1
fi
if hits=$(grep -rnE '#include "models/' data); then
  echo "data/ includes models/:"; echo "$hits"; status=1
fi
if hits=$(grep -rnE '\bArch::[a-z]' common data models trainer launch --include='*.cpp' --include='*.h' |
           grep -vE '^models/spec/(families/|arch\.h:)'); then
  echo "product code outside models/spec/families/ and models/spec/arch.h branches on an architecture (read arch_layout instead):"
  echo "$hits"; status=1
fi
# kernels/ sits under models/: the modules call it, it includes no model, data or trainer code.
if hits=$(grep -rnE '#include "(models|data|trainer)/' kernels); then
  echo "kernels/ includes models/, data/ or trainer/ (it sits below them):"; echo "$hits"; status=1
fi
# An evaluation task is one type: only its own file (and its registration) names it.
tasks='(perplexity|passkey|niah_[a-z]+|vt|cwe)'
if hits=$(grep -rnE "(==|!=) *\"$tasks\"|\"$tasks\" *(==|!=)|find\(.*\"$tasks\"\)" common data models trainer launch \
             --include='*.cpp' --include='*.h'); then
  echo "product code compares an evaluation task's name (ask the task, or scores_windows, instead):"
  echo "$hits"; status=1
fi
# One job a file: no product file over 500 lines unless it does one job, each named here with why.
long_file_exceptions=(
  data/bpe_tokenizer.cpp  # one byte-level BPE tokenizer (pre-tokenizer, merges, normalisers), as its peers are
)
while read -r lines file; do
  [[ $file == total ]] && continue
  (( lines <= 500 )) && continue
  [[ " ${long_file_exceptions[*]} " == *" $file "* ]] && continue
  echo "$file has $lines lines (over 500): split it by concern, or name it in long_file_exceptions with why"
  status=1
done < <(find common data kernels models trainer launch -name '*.cpp' -o -name '*.h' -o -name '*.cu' | sort | xargs wc -l)
[[ $status == 0 ]] && echo "layout: trainer/{${order[*]}} include only downward; trainer/config and models/spec are torch-free; data/ does not include models/; only models/spec/families/ and models/spec/arch.h name an arch; no code compares a task's name; no product file over 500 lines but ${long_file_exceptions[*]}"
exit $status
