import pickle,sys,bisect
for f in sys.argv[1:]:
    host,dev=pickle.load(open(f,"rb"))
    bycorr={x[5]:x for x in dev}
    launches=sorted((h[1],c) for c,h in host.items() if c in bycorr)
    comp_launch=[(t,c) for t,c in launches if bycorr[c][2]=="14"]
    ct=[t for t,c in comp_launch]
    for kind in ("MemcpyD2H","MemcpyH2D"):
        xs=[]
        for x in dev:
            if x[3]!=kind: continue
            hl=host[x[5]][1]; i=bisect.bisect_left(ct,hl)-1
            evt=bycorr[comp_launch[i][1]][1] if i>=0 else 0
            sp=[bycorr[c] for t,c in launches if t<hl and bycorr[c][2]==x[2]]
            xs.append((max(evt,sp[-1][1] if sp else 0),hl,x))
        n=0; ex=None; gain=[]
        for r,hl,x in xs:
            ys=[(r2,h2,y) for r2,h2,y in xs if h2<hl and y[0]>x[0] and r2>x[0]]
            if ys:
                n+=1; ex=ex or (x,ys[0]); gain.append(min(y[0] for _,_,y in ys)-x[0])
        print(f.split("sr_")[1][:-4],kind,"copies that took the link before an earlier-issued copy that was not yet ready:",n,"of",len(xs), ("; e.g. %s (%s) started %.1f ms before %s issued ahead of it"%(ex[0][4],ex[0][2],(ex[1][2][0]-ex[0][0])/1e6,ex[1][2][4]) if ex else ""))
