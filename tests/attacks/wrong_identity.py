# Canary, not an attack: a plainly wrong softmax (y = x). Evaluated after an attack in the same
# executor, it must still be rejected; if it passes, the attack changed the judge for later jobs.
def kernel(inputs, outputs, sizes):
    outputs["y"].copy_(inputs["x"])
