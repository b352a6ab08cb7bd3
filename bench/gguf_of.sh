# Sourced by the bench scripts: `gguf_of ALIAS` prints the path of a fetched model's GGUF (scripts/fetch-models
# puts them under HEARTH_MODELS, default ~/.cache/hearth/models); an unknown alias exits with status 2.
gguf_of() {
  local models="${HEARTH_MODELS:-$HOME/.cache/hearth/models}"
  case "$1" in
    qwen2.5-coder-0.5b) echo "$models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" ;;
    qwen2.5-coder-1.5b) echo "$models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" ;;
    smollm2-135m) echo "$models/SmolLM2-135M-Instruct.Q4_1.gguf" ;;
    gemma3-270m) echo "$models/gemma-3-270m-q4_k_m.gguf" ;;
    *) echo "unknown model $1" >&2; exit 2 ;;
  esac
}
