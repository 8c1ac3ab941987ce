# Lists the ATen overloads tagged torch.Tag.core (Core ATen IR), one per line, sorted.
import torch
names = set()
for pk in dir(torch.ops.aten):
    try:
        packet = getattr(torch.ops.aten, pk)
    except Exception:
        continue
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        continue
    for ov in packet.overloads():
        op = getattr(packet, ov)
        if torch.Tag.core in op.tags:
            names.add(f"aten.{pk}.{ov}")
print(f"# Core ATen IR: the ATen overloads tagged torch.Tag.core in PyTorch {torch.__version__} ({len(names)} overloads).")
print("# Written by traces/capture/core_aten.py; replay list counts how many of them the op table covers.")
for n in sorted(names):
    print(n)
