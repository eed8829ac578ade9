"""example_common.py - what resnet.py and lm.py share: the training loop,
plain or elastic, and the parameter hash every rank prints so that runs
can be compared. Kept beside the examples (they import it from their own
folder), so each example stays a program you can copy with this file."""
import hashlib


def param_hash(model):
    """SHA-256 of every parameter's bytes, in the model's order (hex)."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def run_steps(name, args, model, opt, one_step, banner):
    """one_step(s) for s in 0..args.steps-1. With args.mode "elastic" the
    steps run under ringmaster.torch.elastic: the model (a DDP model: the
    state rebuilds its process group and DDP after a re-formation) and the
    optimizer are committed every args.commit_every steps, and after a
    re-formation the survivors go on from the last commit in the new world."""
    if args.mode != "elastic":
        for s in range(args.steps):
            one_step(s)
        return
    import ringmaster
    import ringmaster.torch.elastic as elastic
    state = elastic.TorchState(model, opt, step=0)

    def on_reset(st):
        banner()
        print("%s: rank %d: re-formed with %d ranks at step %d"
              % (name, ringmaster.rank(), ringmaster.size(), st.step), flush=True)

    @elastic.run(on_reset=on_reset)
    def run(state):
        while state.step < args.steps:
            one_step(state.step)
            state.step += 1
            if state.step % args.commit_every == 0:
                state.commit()
    run(state)
