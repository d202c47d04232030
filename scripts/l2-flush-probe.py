# How the L2 flush before a timed launch changes small-M GEMM timings: cuBLAS (through
# PyTorch) after a memset of 4x the L2 (dirty lines), after a memset then a read (clean), and
# after a read of another buffer. Run on a GPU machine with PyTorch: python3 scripts/l2-flush-probe.py
import torch, statistics
torch.backends.cuda.matmul.allow_tf32=False
dev=torch.device('cuda'); print(torch.cuda.get_device_name())
L2=torch.cuda.get_device_properties(0).L2_cache_size; print("L2",L2)
buf=torch.empty(4*L2//4, dtype=torch.float32, device=dev)
buf2=torch.empty(4*L2//4, dtype=torch.float32, device=dev)
def flush(kind):
    if kind=="dirty": buf.fill_(1.5)
    elif kind=="clean": buf.fill_(1.5); buf.sum()
    elif kind=="readonly": buf2.sum()
def t(fn,kind,reps=30):
    ts=[]
    for _ in range(reps):
        flush(kind)
        s=torch.cuda.Event(enable_timing=True); e=torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e)*1000)
    return statistics.median(ts)
buf2.fill_(1.0); torch.cuda.synchronize()
for (M,N,K) in [(16,4096,4096),(32,11008,4096),(16,14336,4096),(256,4096,4096),(16,18944,3584),(8,512,1<<20)]:
    x=torch.randn(M,K,device=dev,dtype=torch.bfloat16); w=torch.randn(N,K,device=dev,dtype=torch.bfloat16)
    fn=lambda: x@w.t()
    fn(); torch.cuda.synchronize()
    res={k:t(fn,k) for k in ["dirty","clean","readonly","dirty"]}
    by=(M*K+N*K+M*N)*2
    print(f"{M}x{N}x{K} {by/2**20:.0f}MiB", {k:round(v,1) for k,v in res.items()}, "TB/s clean", round(by/res['clean']/1e6,2))
a=torch.empty(64<<20,dtype=torch.bfloat16,device=dev); b=torch.empty_like(a)
for k in ["dirty","clean"]:
    v=t(lambda: b.copy_(a),k); print("copy 128MiB",k,round(v,1),"TB/s",round(2*a.numel()*2/v/1e6,2))
