#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
static uint64_t s=88172645463325252ull;
static inline uint64_t rnd(){ s^=s<<13; s^=s>>7; s^=s<<17; return s; }
#define W 4
long n; long *slot_home, *slot_alt; int *cnt; int *spill;
/* slot (line*W+i): key with home/alt; occupied if i<cnt[line] */
#define MAXQ 4096
long q[MAXQ]; int par[MAXQ]; int parslot[MAXQ];
int maxnodes;
long moves_total=0;
static int place(long line, long h, long a){ int i=cnt[line]++; slot_home[line*W+i]=h; slot_alt[line*W+i]=a; return i; }
/* try to free a slot in one of the start lines by moving home-resident keys to their alts */
static int bfs(long h, long a, long *freed){
  int head=0, tail=0; q[tail]=h; par[tail]=-1; tail++; q[tail]=a; par[tail]=-1; tail++;
  while(head<tail && tail<maxnodes){
    long L=q[head];
    for(int i=0;i<W;i++){
      long y_home=slot_home[L*W+i], y_alt=slot_alt[L*W+i];
      if(y_home!=L) continue; /* only home-resident keys move */
      if(cnt[y_alt]<W){
        /* unwind: move y to y_alt, then parent chain */
        long dst=y_alt; int node=head; int si=i;
        for(;;){
          long src=q[node];
          place(dst, slot_home[src*W+si], slot_alt[src*W+si]); spill[slot_home[src*W+si]]++; moves_total++;
          /* remove from src slot si: swap with last */
          int last=--cnt[src]; slot_home[src*W+si]=slot_home[src*W+last]; slot_alt[src*W+si]=slot_alt[src*W+last];
          if(par[node]<0){ *freed=src; return 1; }
          dst=src; si=parslot[node]; node=par[node];
        }
      }
      if(tail<maxnodes){ q[tail]=y_alt; par[tail]=head; parslot[tail]=i; tail++; }
    }
    head++;
  }
  return 0;
}
int main(int argc,char**argv){
  n = 1L<<atoi(argv[2]); maxnodes=atoi(argv[1]);
  slot_home=malloc(n*W*8); slot_alt=malloc(n*W*8); cnt=calloc(n,4); spill=calloc(n,4);
  long inserted=0, stash=0; long first_fail=-1;
  double marks[]={0.7,0.75,0.8,0.82,0.85,0.88,0.9,0.92,0.95}; int mi=0;
  long cap=n*W;
  while(mi<9){
    long h=rnd()%n, a=rnd()%n; if(a==h) a=(a+1)%n;
    if(cnt[h]<W) place(h,h,a);
    else if(cnt[a]<W){ place(a,h,a); spill[h]++; }
    else { long fr; if(maxnodes>0 && bfs(h,a,&fr)){ place(fr,h,a); if(fr!=h) spill[h]++; } else { stash++; spill[h]++; if(first_fail<0) first_fail=inserted; } }
    inserted++;
    if(inserted>=marks[mi]*cap){
      long full=0, inalt=0; for(long L=0;L<n;L++){ if(cnt[L]==W) full++; for(int i=0;i<cnt[L];i++) if(slot_home[L*W+i]!=L) inalt++; }
      printf("nodes=%d lines=2^%s load %.2f: alt %.4f stash %ld first-fail@%.3f full %.3f moves/key %.3f | hit %.3f miss %.3f\n",
        maxnodes, argv[2], marks[mi], (double)inalt/inserted, stash, first_fail<0?0:(double)first_fail/cap, (double)full/n, (double)moves_total/inserted,
        1.0+(double)inalt/inserted, 1.0+(double)full/n);
      mi++;
    }
  }
}
