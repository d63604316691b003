import sys
from jax.profiler import ProfileData
f=sys.argv[1]
d=ProfileData.from_file(f)
host={}; dev=[]
for p in d.planes:
    for ln in p.lines:
        for e in ln.events:
            st=dict(e.stats)
            if p.name=="/host:CPU" and "correlation_id" in st:
                host[st["correlation_id"]]=(e.name,e.start_ns,e.duration_ns)
            if p.name.startswith("/device") and "correlation_id" in st:
                dev.append((e.start_ns,e.start_ns+e.duration_ns,ln.name[8:10],e.name,st.get("hlo_op",""),st["correlation_id"],st.get("memcpy_details","")))
dev.sort()
import pickle; pickle.dump((host,dev),open(sys.argv[2],"wb"))
print(len(host),len(dev))
