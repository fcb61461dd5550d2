#!/usr/bin/python3
"""An inference pod's entrypoint: ask devplaced for the device first, then load the model with it.

    DEVPLACE_ADDRESS=unix:/run/devplace/devplace.sock python3 pod_entrypoint.py [MODEL]

The resolve happens before torch or transformers is imported, so the pod's own PyTorch never
initialises a device it should not use. Without transformers installed it prints what it would pass
(the device string, device_map and max_memory), so it runs anywhere a daemon answers.
Exit status: 0 answered, 1 the daemon refused or could not be reached (the message says why).
"""

import importlib.util
import sys

import devplace


def main() -> int:
    model = sys.argv[1] if len(sys.argv) > 1 else "distilgpt2"
    try:
        # Sends this process's CUDA_VISIBLE_DEVICES & co. and its /dev accelerator nodes, like
        # `devplace resolve --workload=inference --device_map=auto`.
        with devplace.Client() as client:
            answer = client.resolve("inference", device_map="auto")
    except devplace.ResolveError as e:
        print(f"pod_entrypoint: devplace: {e}", file=sys.stderr)
        return 1
    for warning in answer.warnings:
        print(f"pod_entrypoint: warning: {warning}", file=sys.stderr)

    if answer.device == "cpu" or not answer.max_memory:
        # One device: from_pretrained(device_map="cpu") / pipeline(device="cuda:0").
        kwargs = {"device_map": answer.device}
    else:
        # Several devices, or budgets to respect: let Accelerate spread the model within them.
        kwargs = {"device_map": "auto", "max_memory": answer.max_memory}

    if importlib.util.find_spec("transformers") is None:
        print(f"device={answer.device}")
        print(f"would call: AutoModelForCausalLM.from_pretrained({model!r}, **{kwargs!r})")
        return 0
    from transformers import AutoModelForCausalLM  # imported only after the device is known

    loaded = AutoModelForCausalLM.from_pretrained(model, **kwargs)
    print(f"device={answer.device} loaded {model} on {getattr(loaded, 'device', answer.device)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
