<%page args="ptx"/>
## The fence of kernels whose work-groups read what others wrote in the same launch (grid
## barriers, counts of finished chunks): ``ptx`` where the includer's device takes inline
## PTX (NVIDIA's driver).
// every global write of this work-item so far seen by every work-group after it
inline void global_fence(void)
{
% if ptx:
    asm volatile("membar.gl;" ::: "memory");
% else:
    mem_fence(CLK_GLOBAL_MEM_FENCE);
% endif
}
