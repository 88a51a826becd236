"""Run inside the vLLM CPU venv: serve the target with an EAGLE-3 draft, greedy-decode token prompts and
print the outputs and the spec-decode counters as one JSON line (used by test_trainer_vllm.py)."""

from __future__ import annotations

import json
import sys


def main() -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    target, draft, k, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    prompts = json.loads(sys.stdin.read())
    llm = LLM(model=target, speculative_config={"method": "eagle3", "model": draft, "num_speculative_tokens": k},
              max_model_len=256, enforce_eager=True, disable_log_stats=False, seed=0)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                        SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True))
    counters = {}
    for metric in llm.get_metrics():
        if metric.name.startswith("vllm:spec_decode") and hasattr(metric, "value"):
            counters[metric.name] = metric.value
        elif metric.name.startswith("vllm:spec_decode") and hasattr(metric, "values"):
            counters[metric.name] = list(metric.values)  # per draft position
    print("RESULT " + json.dumps({"counters": counters, "outputs": [list(o.outputs[0].token_ids) for o in outs]}))


if __name__ == "__main__":
    main()
