import pickle,sys
for f in sys.argv[1:]:
    host,dev=pickle.load(open(f,"rb"))
    print(f)
    big=[x for x in dev if x[3]=="MemcpyD2H" and "268435456" in x[6]]
    for B in big:
        S=min([x for x in dev if x[3]=="MemcpyD2H" and "4194304" in x[6]], key=lambda x:abs(x[0]-B[0]))
        t0=min(B[0],S[0])
        flip = B[0]<S[0]
        out=[]
        for X,lab in ((B,"big"),(S,"small")):
            prev=[y for y in dev if y[2]==X[2] and y[1]<=X[0] ]
            p=prev[-1] if prev else (0,0,"","","none",0,"")
            out.append(f"{lab}#{X[2]} prev {p[4]} ended {(p[1]-t0)/1e3:9.1f}us issue {(host[X[5]][1]-host[B[5]][1])/1e3:5.1f}us corr {X[5]}")
        # events on all streams starting within [t0-50us, t0+200us]
        near=[f"{y[2]}:{y[4]}@{(y[0]-t0)/1e3:.1f}" for y in dev if t0-30e3<y[0]<t0+30e3 and y[3]!="MemcpyD2H"]
        print("FLIP " if flip else "     ", " | ".join(out), near)
