import { cycleTheme, theme } from '../state/theme';
import { IconButton } from './IconButton';

/** Auto (the system's), light, dark. */
export function ThemeButton() {
  const t = theme.value;
  const icon = t === 'light' ? 'sun' : t === 'dark' ? 'moon' : 'auto';
  return <IconButton icon={icon} label={`Theme: ${t}`} data-testid="theme" onClick={cycleTheme} />;
}
