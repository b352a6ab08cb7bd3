import { panel } from '../state/ui';
import { IconButton } from './IconButton';

const keys: [string, string][] = [
  ['Enter', 'send'],
  ['Shift + Enter', 'new line'],
  ['Esc', 'stop the reply (or close a panel)'],
  ['Ctrl/⌘ + Shift + O', 'new chat'],
  ['Ctrl/⌘ + K', 'search chats'],
  ['Ctrl/⌘ + Shift + S', 'chat settings'],
  ['Ctrl/⌘ + /', 'these shortcuts'],
  ['/', 'focus the message box'],
];

export function HelpPanel() {
  return (
    <section class="panel" aria-label="Keyboard shortcuts">
      <div class="panel-head">
        <h3>Keyboard shortcuts</h3>
        <IconButton icon="close" label="Close" onClick={() => (panel.value = 'none')} />
      </div>
      <dl class="stats-table">
        {keys.map(([k, v]) => (
          <div key={k}>
            <dt>
              <kbd>{k}</kbd>
            </dt>
            <dd>{v}</dd>
          </div>
        ))}
      </dl>
    </section>
  );
}
