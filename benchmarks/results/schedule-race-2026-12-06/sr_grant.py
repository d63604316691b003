import pickle,sys,bisect
from collections import Counter
tot=Counter()
for f in sys.argv[1:]:
    host,dev=pickle.load(open(f,"rb"))
    bycorr={x[5]:x for x in dev}
    launches=sorted((h[1],c) for c,h in host.items() if c in bycorr)
    comp_launch=[(t,c) for t,c in launches if bycorr[c][2]=="14"]
    ct=[t for t,c in comp_launch]
    sz=lambda y:int(y[6].split("size:")[1].split()[0])
    for kind in ("MemcpyD2H","MemcpyH2D"):
        xs=[]
        for x in dev:
            if x[3]!=kind: continue
            hl=host[x[5]][1]; i=bisect.bisect_left(ct,hl)-1
            evt=bycorr[comp_launch[i][1]][1] if i>=0 else 0
            sp=[bycorr[c] for t,c in launches if t<hl and bycorr[c][2]==x[2]]
            xs.append((max(evt,sp[-1][1] if sp else 0),x))
        xs.sort(key=lambda v:v[1][0])
        c=Counter(); prev=None
        for r,x in xs:
            waiting=[(r2,x2) for r2,x2 in xs if x2[0]>=x[0] and r2<=x[0]+1e3]
            if len(waiting)>1:
                c["grants with >1 waiting"]+=1
                c["winner smallest"]+= sz(x)==min(sz(y) for _,y in waiting)
                c["winner strictly smallest"]+= sz(x)<min(sz(y) for _,y in waiting if y is not x)
                c["winner first issued"]+= host[x[5]][1]==min(host[y[5]][1] for _,y in waiting)
                c["winner first ready"]+= r==min(r2 for r2,_ in waiting)
                c["winner same stream as previous grant"]+= prev is not None and prev[2]==x[2]
                c["a same-stream-as-previous copy was waiting"]+= prev is not None and any(y[2]==prev[2] for _,y in waiting)
            prev=x
        print(f.split("sr_")[1][:-4],kind,dict(c))
