import { VfsState } from '../../src/vfs/state.js';

/** A committed tree in memory to work over: /keep.txt, /src/a.txt, /src/sub/b.txt, /d/x.txt, /d/y.txt, /empty/ */
export function seededState(quota: ConstructorParameters<typeof VfsState>[0]['quota'] = {}): VfsState {
  const state = new VfsState({ dir: null, quota });
  state.change((txn) => {
    txn.write('/keep.txt', 'keep\n');
    txn.write('/src/a.txt', 'alpha\n');
    txn.write('/src/sub/b.txt', 'beta\n');
    txn.write('/d/x.txt', 'x\n');
    txn.write('/d/y.txt', 'y\n');
    txn.mkdir('/empty');
  });
  return state;
}
