"""transformers on the GPU, bf16, for the SmolLM2 prompts of tests/goldens/logits_smollm2.json (run on the device).

    python3 tools/oracle/gpu_logits.py MODELS_DIR OUT.json [--dtype bf16|f32]

Loads MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf with transformers (dequantized, as logits_goldens.py does, but
on CUDA in the given dtype), and for every golden prompt writes the last-position logits (top 64 and the same
sampled ids as the golden), 32 greedy tokens and the top-1/top-2 gaps, in the golden's shape. The GPU parity test
reads it through HEARTH_HF_GPU_GOLDEN. Needs torch, transformers and gguf (carry the gguf wheel).
"""
import json, sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]


def main():
    models, out = sys.argv[1], sys.argv[2]
    dtype = torch.float32 if "--dtype" in sys.argv and sys.argv[sys.argv.index("--dtype") + 1] == "f32" else torch.bfloat16
    import transformers
    from transformers import AutoModelForCausalLM

    g = json.load(open(ROOT / "tests/goldens/logits_smollm2.json"))
    m = AutoModelForCausalLM.from_pretrained(models, gguf_file=g["model_file"], dtype=dtype,
                                             attn_implementation="eager").cuda().eval()
    res = []
    for p in g["prompts"]:
        ids = p["prompt_ids"]
        sample_ids = [i for i, _ in p["hf"]["sample"]]
        with torch.no_grad():
            o = m(input_ids=torch.tensor([ids]).cuda(), use_cache=True)
            cache = o.past_key_values
            last = o.logits[0, -1].float().cpu().numpy()
            first = last.copy()
            greedy, gaps = [], []
            for _ in range(len(p["hf"]["greedy"])):
                t = int(np.argmax(last))
                s = np.sort(last.astype(np.float64))[-2:]
                greedy.append(t)
                gaps.append(float(s[1] - s[0]))
                o = m(input_ids=torch.tensor([[t]]).cuda(), past_key_values=cache, use_cache=True)
                cache = o.past_key_values
                last = o.logits[0, -1].float().cpu().numpy()
        order = np.argsort(-first.astype(np.float64), kind="stable")[:64]
        res.append({"prompt_ids": ids, "top": [[int(i), float(first[i])] for i in order],
                    "sample": [[i, float(first[i])] for i in sample_ids], "greedy": greedy, "gaps": gaps})
    json.dump({"reference": {"transformers": transformers.__version__, "torch": torch.__version__,
                             "device": torch.cuda.get_device_name(), "dtype": str(dtype),
                             "command": "python3 tools/oracle/gpu_logits.py MODELS_DIR OUT.json"},
               "prompts": res}, open(out, "w"))
    print(f"gpu_logits: {len(res)} prompts -> {out}")


if __name__ == "__main__":
    main()
